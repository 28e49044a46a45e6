//! A private kube-apiserver + etcd for trying kubectl-vap by hand (the same binaries the tests
//! use): prints the admin kubeconfig's path, serves until stdin closes or Ctrl-C.
//!
//! ```sh
//! export KUBEBUILDER_ASSETS=$(bash tests/kubeenv/build.sh)
//! cargo run -p testenv --example serve
//! ```

use std::io::Read as _;

fn main() {
    let env = testenv::TestEnv::start();
    println!("KUBECONFIG={}", env.kubeconfig_admin().display());
    eprintln!("serving; close stdin (Ctrl-D) or press Ctrl-C to stop");
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}
