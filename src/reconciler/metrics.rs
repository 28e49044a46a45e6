//! Counters for `/metrics` (Prometheus text format).
