//! Text for people, shared by every layer: [`error_text`] says an error chain in one line; [`printable`] and [`printable_lines`] (the pure core's `text`, re-exported) make text
//! safe for a terminal. The error formatter is here, not in the core crate, because it reads
//! kube's errors (an API error in the server's words).

use std::error::Error;

pub use kubectl_vap_core::text::*;

/// The names `typed` may have meant, best first (at most three): the same name in another
/// case, names that start with it or contain it, then names a few typos away (Jaro-Winkler
/// similarity, as clap's own "a similar subcommand exists").
pub fn did_you_mean<'a>(typed: &str, names: &[&'a str]) -> Vec<&'a str> {
    let lower = typed.to_lowercase();
    let mut scored: Vec<(u8, f64, &'a str)> = names
        .iter()
        .filter(|n| **n != typed)
        .filter_map(|n| {
            let l = n.to_lowercase();
            let similarity = strsim::jaro_winkler(&lower, &l);
            let rank = if l == lower {
                0
            } else if l.starts_with(&lower) || lower.starts_with(&l) {
                1
            } else if !lower.is_empty() && l.contains(&lower) {
                2
            } else if similarity >= 0.85 {
                3
            } else {
                return None;
            };
            Some((rank, similarity, *n))
        })
        .collect();
    scored.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)));
    scored.into_iter().take(3).map(|(_, _, n)| n).collect()
}

/// ` (did you mean "a"?)`, ` (did you mean "a" or "b"?)`, or nothing.
pub fn did_you_mean_text(typed: &str, names: &[&str]) -> String {
    let close: Vec<String> = did_you_mean(typed, names)
        .iter()
        .map(|n| format!("{n:?}"))
        .collect();
    match close.as_slice() {
        [] => String::new(),
        [one] => format!(" (did you mean {one}?)"),
        [rest @ .., last] => format!(" (did you mean {} or {last}?)", rest.join(", ")),
    }
}

/// An error as one line, each cause once: it and its sources. Some errors print their source
/// inside their own message (kube's do), so `{:#}` would repeat it at every level of the chain.
/// Any error: a typed one, or what reaches `main` (`&*anyhow_error`).
pub fn error_text(e: &(dyn Error + 'static)) -> String {
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
        if let Some(kube::Error::Api(status)) = as_kube_error(c) {
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
        // Said already, by the last level said: as it is, or inside its own words (a
        // WriteError's "forbidden: <cause> (grant …)"), not only at the end.
        if seg.is_empty() || out.last().is_some_and(|l| l.contains(seg)) {
            continue;
        }
        out.push(seg.to_string());
    }
    out.join(": ")
}

/// `e` as a kube error: held as it is, or boxed or shared (a source is often `Box<kube::Error>`,
/// and `downcast_ref` sees the box, not what it holds).
fn as_kube_error<'a>(e: &'a (dyn Error + 'static)) -> Option<&'a kube::Error> {
    e.downcast_ref::<kube::Error>()
        .or_else(|| e.downcast_ref::<Box<kube::Error>>().map(|b| &**b))
        .or_else(|| {
            e.downcast_ref::<std::sync::Arc<kube::Error>>()
                .map(|a| &**a)
        })
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

    /// Says only its own words; its cause is its source (as anyhow's `.context` does).
    #[derive(Debug, thiserror::Error)]
    #[error("{what}")]
    struct Context<E: Error + 'static> {
        what: &'static str,
        #[source]
        source: E,
    }

    fn context<E: Error + 'static>(what: &'static str, source: E) -> Context<E> {
        Context { what, source }
    }

    fn refused() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused")
    }

    fn api_error(status: serde_json::Value) -> kube::Error {
        let status: kube::core::Status = serde_json::from_value(status).expect("a Status");
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn a_wrapper_that_repeats_its_source_is_said_once() {
        let e = context(
            "starting",
            Same(Repeats {
                what: "discovering",
                source: refused(),
            }),
        );
        assert_eq!(error_text(&e), "starting: discovering: refused");
    }

    /// A 403 as the API server sends it, wrapped as the commands wrap it: one line with the
    /// server's words, never kube's debug dump of the Status.
    #[test]
    fn a_refusal_is_said_in_the_servers_words() {
        let e = context(
            "reading Lease gatekeeper-system/kubectl-vap",
            api_error(serde_json::json!({
                "status": "Failure",
                "message": "leases.coordination.k8s.io \"kubectl-vap\" is forbidden: User \"vap-user\" cannot get resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"gatekeeper-system\"",
                "reason": "Forbidden",
                "details": {"name": "kubectl-vap", "group": "coordination.k8s.io", "kind": "leases"},
                "code": 403
            })),
        );
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

    /// A bare API error says the server's words, with the reason and code it has.
    #[test]
    fn an_api_error_says_its_message_reason_and_code() {
        let e = api_error(serde_json::json!({ "message": "no" }));
        assert_eq!(kube_error_text(&e), "no");
        assert_eq!(error_text(&e), "no");
        let e = api_error(serde_json::json!({ "message": "gone", "code": 404 }));
        assert_eq!(error_text(&e), "gone (404)");
        let e = api_error(
            serde_json::json!({ "message": "busy", "reason": "TooManyRequests", "code": 429 }),
        );
        assert_eq!(error_text(&e), "busy (TooManyRequests, 429)");
    }

    /// Each cause once, whether a level prints its source after its words (`Repeats`), says
    /// exactly its source (`Same`) or only its own words (`Context`).
    #[test]
    fn each_cause_is_said_once() {
        let e = context(
            "starting the reconciler against https://127.0.0.1:1",
            Repeats {
                what: "discovering admissionregistration.k8s.io/v1",
                source: std::io::Error::new(
                    std::io::ErrorKind::ConnectionRefused,
                    "connection refused",
                ),
            },
        );
        assert_eq!(
            error_text(&e),
            "starting the reconciler against https://127.0.0.1:1: discovering admissionregistration.k8s.io/v1: connection refused"
        );
        // Three levels, two of which repeat what they wrap.
        let e = context(
            "running",
            Same(Repeats {
                what: "connecting",
                source: refused(),
            }),
        );
        let text = error_text(&e);
        assert_eq!(text, "running: connecting: refused");
        assert_eq!(text.matches("refused").count(), 1);
    }

    /// A level that says its source in the middle of its own words: the source is not said
    /// again after it.
    #[test]
    fn a_source_said_inside_its_wrappers_words_is_said_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("forbidden: {0} (grant the ClusterRole)")]
        struct Forbidden(#[source] Repeats);
        let e = context(
            "reconciling",
            Forbidden(Repeats {
                what: "create ValidatingAdmissionPolicy/x",
                source: refused(),
            }),
        );
        assert_eq!(
            error_text(&e),
            "reconciling: forbidden: create ValidatingAdmissionPolicy/x: refused (grant the ClusterRole)"
        );
    }

    #[test]
    fn close_names_are_suggested() {
        let names = ["k8srequiredlabels", "k8sallowedrepos", "prod-eu"];
        assert_eq!(
            did_you_mean("k8srequiredlabel", &names),
            ["k8srequiredlabels"]
        );
        assert_eq!(
            did_you_mean("K8sRequiredLabels", &names),
            ["k8srequiredlabels"]
        );
        assert_eq!(did_you_mean("prd-eu", &names), ["prod-eu"]);
        assert!(did_you_mean("zzz", &names).is_empty());
        assert_eq!(
            did_you_mean_text("prod", &names),
            " (did you mean \"prod-eu\"?)"
        );
        assert_eq!(did_you_mean_text("zzz", &names), "");
    }

    /// A chain of levels that each say only their own words: every one, in order.
    #[test]
    fn a_chain_of_contexts_says_every_level() {
        let e = context("a", context("b", context("c", refused())));
        assert_eq!(error_text(&e), "a: b: c: refused");
    }

    /// An API error deep in a chain ends it: its source (the Status again) is not said.
    #[test]
    fn an_api_error_ends_the_chain() {
        let e = context(
            "writing",
            api_error(
                serde_json::json!({ "message": "denied", "reason": "Forbidden", "code": 403 }),
            ),
        );
        assert_eq!(error_text(&e), "writing: denied (Forbidden, 403)");
    }

    /// A boxed API error (how the IO edge's errors hold theirs) is the server's words too.
    #[test]
    fn a_boxed_api_error_is_said_in_the_servers_words() {
        #[derive(Debug, thiserror::Error)]
        #[error("{what}: {}", kube_error_text(source))]
        struct Request {
            what: &'static str,
            #[source]
            source: Box<kube::Error>,
        }
        let e = context(
            "applying",
            Request {
                what: "create ValidatingAdmissionPolicy/x",
                source: Box::new(api_error(
                    serde_json::json!({ "message": "busy", "code": 503 }),
                )),
            },
        );
        let text = error_text(&e);
        assert_eq!(
            text,
            "applying: create ValidatingAdmissionPolicy/x: busy (503)"
        );
        assert!(!text.contains("Status {"), "{text}");
    }

    /// kube's transport errors say "ServiceError: " before their cause: left out.
    #[test]
    fn kubes_service_error_prefix_is_left_out() {
        #[derive(Debug, thiserror::Error)]
        #[error("ServiceError: {0}")]
        struct Service(#[source] std::io::Error);
        let e = context("listing", Service(refused()));
        assert_eq!(error_text(&e), "listing: refused");
    }
}
