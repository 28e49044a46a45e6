//! Prometheus text: the API server's `apiserver_request_total` (what benchmarks count) and
//! kubectl-vap's own `/metrics`.

use std::collections::BTreeMap;

/// The samples of `apiserver_request_total` in the API server's `/metrics` text: each one's
/// labels and value, for a caller to sum by whichever labels it counts.
pub fn request_samples(metrics: &str) -> Vec<(BTreeMap<&str, &str>, f64)> {
    let mut out = Vec::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let labels = labels
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k, v.trim_matches('"')))
            .collect();
        out.push((labels, value.trim().parse::<f64>().unwrap_or(0.0)));
    }
    out
}

/// `apiserver_request_total` summed by the keys `keys` gives each sample (none, one or more).
pub fn requests_by<K>(metrics: &str, keys: K) -> BTreeMap<String, f64>
where
    K: Fn(&BTreeMap<&str, &str>) -> Vec<String>,
{
    let mut out = BTreeMap::new();
    for (labels, value) in request_samples(metrics) {
        for key in keys(&labels) {
            *out.entry(key).or_default() += value;
        }
    }
    out
}

/// `apiserver_request_total` summed by verb.
pub fn requests_by_verb(metrics: &str) -> BTreeMap<String, f64> {
    requests_by(metrics, |l| vec![label(l, "verb").to_string()])
}

/// A sample's label (empty when absent).
pub fn label<'a>(labels: &BTreeMap<&str, &'a str>, name: &str) -> &'a str {
    labels.get(name).copied().unwrap_or_default()
}

/// What grew from `before` to `after`, by key.
pub fn growth(
    after: &BTreeMap<String, f64>,
    before: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

/// The sum of the samples whose line starts with `prefix` (a metric name, or a name and the
/// start of its labels, `kubectl_vap_writes_total{`); 0 when there are none. HELP and TYPE
/// lines start with `#`, so they never count.
pub fn sum(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}
