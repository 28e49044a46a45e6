//! What the benchmarks share besides objects and metrics: their knobs from the environment,
//! their runtime, their statistics ([`quantile`], [`median`], [`peak_rss_mib`]) and
//! kube-apiserver's profiles under `BENCH_PPROF` ([`apiserver_profile`], [`apiserver_heap`]):
//! one definition each, for every bench.

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

/// The `q` quantile (0.5: the median, 0.9: p90) of `samples` (durations, ratios), nearest
/// rank; zero (`T::default()`) when empty. The one quantile of the benchmarks: add no other.
pub fn quantile<T: Copy + Default + PartialOrd>(samples: &[T], q: f64) -> T {
    let mut v = samples.to_vec();
    // NaN (a ratio of nothing) sorts as equal: it cannot be ordered, and must not panic.
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    if v.is_empty() {
        return T::default();
    }
    let rank = ((q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// [`quantile`] 0.5: the lower middle of an even count.
pub fn median<T: Copy + Default + PartialOrd>(samples: &[T]) -> T {
    quantile(samples, 0.5)
}

/// The peak resident set size (VmHWM) of process `pid` so far, in MiB; `None` where /proc
/// does not say (not Linux, the process gone). This process: `std::process::id()`.
pub fn peak_rss_mib(pid: u32) -> Option<f64> {
    testenv::peak_rss_kib(pid).map(|k| k as f64 / 1024.0)
}

/// With `BENCH_PPROF=<dir>`, a CPU profile of kube-apiserver over the next `secs` seconds,
/// written to `<dir>/<name>.pb.gz` (read with `go tool pprof -top`); `None` without the knob.
/// Await the handle to know the file is written.
pub fn apiserver_profile(
    client: &kube::Client,
    name: &str,
    secs: u64,
) -> Option<tokio::task::JoinHandle<()>> {
    apiserver_pprof(client, &format!("profile?seconds={secs}"), name)
}

/// With `BENCH_PPROF=<dir>`, kube-apiserver's heap profile now (after a garbage collection:
/// `gc=1`, so `inuse_space` is what is live), written to `<dir>/<name>.pb.gz` (read with
/// `go tool pprof -sample_index=inuse_space -top`); `None` without the knob.
pub fn apiserver_heap(client: &kube::Client, name: &str) -> Option<tokio::task::JoinHandle<()>> {
    apiserver_pprof(client, "heap?gc=1", name)
}

/// `/debug/pprof/<what>` of kube-apiserver (profiling is on by default) into
/// `$BENCH_PPROF/<name>.pb.gz`, in a task; a failure is printed, not fatal.
fn apiserver_pprof(
    client: &kube::Client,
    what: &str,
    name: &str,
) -> Option<tokio::task::JoinHandle<()>> {
    let dir = std::env::var("BENCH_PPROF").ok()?;
    let client = client.clone();
    let path = std::path::Path::new(&dir).join(format!("{name}.pb.gz"));
    let uri = format!("/debug/pprof/{what}");
    Some(tokio::spawn(async move {
        let req = hyper::Request::get(uri)
            .body(kube::client::Body::empty())
            .expect("request");
        match client.send(req).await {
            Ok(resp) if !resp.status().is_success() => {
                println!("pprof {}: {}", path.display(), resp.status())
            }
            Ok(resp) => match resp.into_body().collect_bytes().await {
                Ok(bytes) => {
                    let _ = std::fs::create_dir_all(&dir);
                    let _ = std::fs::write(&path, &bytes);
                }
                Err(e) => println!("pprof {}: {e}", path.display()),
            },
            Err(e) => println!("pprof {}: {e}", path.display()),
        }
    }))
}
