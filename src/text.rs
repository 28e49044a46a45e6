//! Text for people, shared by every layer: [`error_source_text`] says an error chain in one
//! line; [`printable`] and [`printable_lines`] (the pure core's `text`, re-exported) make text
//! safe for a terminal. The error formatter is here, not in the core crate, because it reads
//! kube's errors (an API error in the server's words).

use std::error::Error;

pub use kubectl_vap_core::text::*;

/// An `anyhow::Error` (what reaches `main`) as one line: [`error_source_text`] of its chain.
pub fn error_text(e: &anyhow::Error) -> String {
    error_source_text(e.as_ref())
}

/// An error as one line, each cause once: it and its sources. Some errors print their source
/// inside their own message (kube's do), so `{:#}` would repeat it at every level of the chain.
pub fn error_source_text(e: &(dyn Error + 'static)) -> String {
    chain_text(std::iter::successors(Some(e), |&e| e.source()))
}

fn chain_text<'a>(chain: impl Iterator<Item = &'a (dyn std::error::Error + 'static)>) -> String {
    // kube wraps transport errors as "ServiceError: <the cause>"; the cause follows anyway.
    let clean = |s: &str| s.replace("ServiceError: ", "");
    // Each error as it prints itself (what a wrapper repeats of it), and as it is shown.
    let mut raw: Vec<String> = Vec::new();
    let mut shown: Vec<String> = Vec::new();
    for c in chain {
        raw.push(clean(&c.to_string()));
        // kube's text of an API error ends in a debug dump of the Status (and its source, the
        // Status, says the message again): the server's words instead, and the chain ends.
        if let Some(kube::Error::Api(status)) = c.downcast_ref::<kube::Error>() {
            shown.push(status_text(status));
            break;
        }
        shown.push(clean(&c.to_string()));
    }
    let mut out: Vec<String> = Vec::new();
    for (i, seg) in shown.iter().enumerate() {
        let next = [raw.get(i + 1), shown.get(i + 1)];
        if next.iter().flatten().any(|n| *n == seg) {
            // A transparent wrapper: its source says the same.
            continue;
        }
        let mut seg = seg.as_str();
        // A wrapper that prints its source after its own words: its words only.
        if let Some(head) = next
            .iter()
            .flatten()
            .find_map(|n| seg.strip_suffix(n.as_str()))
            .and_then(|h| h.strip_suffix(": "))
        {
            seg = head;
        }
        if seg.is_empty() || out.last().is_some_and(|l| l == seg) {
            continue;
        }
        out.push(seg.to_string());
    }
    out.join(": ")
}

/// A kube error for people: the API server's own message, its reason and code, instead of
/// kube's `ApiError: <message> (Status { … })`, which says everything twice and the second time
/// as a Rust debug dump.
pub fn kube_error_text(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => status_text(s),
        other => other.to_string(),
    }
}

fn status_text(s: &kube::core::Status) -> String {
    match (s.reason.is_empty(), s.code) {
        (true, 0) => s.message.clone(),
        (true, code) => format!("{} ({code})", s.message),
        (false, code) => format!("{} ({}, {code})", s.message, s.reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{what}: {source}")]
    struct Repeats {
        what: &'static str,
        #[source]
        source: std::io::Error,
    }

    /// Wraps an error and displays exactly what it wraps.
    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    struct Same(#[source] Repeats);

    #[test]
    fn a_wrapper_that_repeats_its_source_is_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = anyhow::Error::new(Same(Repeats {
            what: "discovering",
            source: io,
        }))
        .context("starting");
        assert_eq!(error_text(&e), "starting: discovering: refused");
    }

    /// A 403 as the API server sends it, wrapped as the commands wrap it: one line with the
    /// server's words, never kube's debug dump of the Status.
    #[test]
    fn a_refusal_is_said_in_the_servers_words() {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure",
            "message": "leases.coordination.k8s.io \"kubectl-vap\" is forbidden: User \"vap-user\" cannot get resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"gatekeeper-system\"",
            "reason": "Forbidden",
            "details": {"name": "kubectl-vap", "group": "coordination.k8s.io", "kind": "leases"},
            "code": 403
        }))
        .expect("a Status");
        let e = anyhow::Error::new(kube::Error::Api(Box::new(status)))
            .context("reading Lease gatekeeper-system/kubectl-vap");
        let text = error_text(&e);
        assert_eq!(
            text,
            "reading Lease gatekeeper-system/kubectl-vap: leases.coordination.k8s.io \"kubectl-vap\" is forbidden: User \"vap-user\" cannot get resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"gatekeeper-system\" (Forbidden, 403)"
        );
        assert!(
            !text.contains("Status {") && !text.contains("ApiError"),
            "{text}"
        );
    }

    /// The formatter takes any error, not only an `anyhow::Error`: a typed one says the same.
    #[test]
    fn a_typed_error_is_said_as_its_anyhow_form() {
        let typed = Same(Repeats {
            what: "discovering",
            source: std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused"),
        });
        assert_eq!(error_source_text(&typed), "discovering: refused");
        assert_eq!(
            error_text(&anyhow::Error::new(typed)),
            "discovering: refused"
        );
        let status = kube::core::Status {
            message: "no".into(),
            reason: String::new(),
            code: 0,
            ..Default::default()
        };
        let e = kube::Error::Api(Box::new(status));
        assert_eq!(kube_error_text(&e), "no");
        assert_eq!(error_source_text(&e), "no");
    }

    #[test]
    fn each_cause_is_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let e = anyhow::Error::new(Repeats {
            what: "discovering admissionregistration.k8s.io/v1",
            source: io,
        })
        .context("starting the reconciler against https://127.0.0.1:1");
        assert_eq!(
            error_text(&e),
            "starting the reconciler against https://127.0.0.1:1: discovering admissionregistration.k8s.io/v1: connection refused"
        );
        assert_eq!(format!("{e:#}").matches("connection refused").count(), 2);
    }
}
