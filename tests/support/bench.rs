//! What the benchmarks share besides objects and metrics: their knobs from the environment and
//! their runtime.

use std::future::Future;

/// `$name` as a number, or `default`.
pub fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `$name` (or `default`) as a comma-separated list.
pub fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Whether cargo runs this as a benchmark (`cargo bench` passes `--bench`); under
/// `cargo test --all-targets` it does not.
pub fn benchmarking() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// Runs `f` on a multi-threaded runtime with 2 workers (the machine's cores).
pub fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

/// The `q` quantile (0.5: the median, 0.9: p90) of `samples`, nearest rank; zero when empty.
/// The one quantile of the benchmarks: add no other `median`.
pub fn quantile(samples: &[std::time::Duration], q: f64) -> std::time::Duration {
    let mut v = samples.to_vec();
    v.sort();
    if v.is_empty() {
        return std::time::Duration::ZERO;
    }
    let rank = ((q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}
