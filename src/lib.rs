//! kubectl-vap library
