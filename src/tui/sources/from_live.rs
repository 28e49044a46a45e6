//! A published `LiveState` as the UI's data, and the data of a live view that is not running
//! (yet): pure, so every header and alert state is tested without a cluster.

use crate::controller::{AccessError, AccessErrorKind, LiveState};
use crate::core::Options;
use crate::snapshot::Snapshot;
use crate::tui::model::data::{Connecting, Data, Origin};
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// One published state as the UI's data, judged by whose settings the controller says apply
/// (`local`: this copy's flags). Pure (analysis included): tested without a cluster.
pub fn data_from_live(
    state: Arc<LiveState>,
    context: &str,
    reconcile: bool,
    local: &Options,
) -> Data {
    let (opts, judged) = state.lease.judge(local);
    // Replay and reconcile go to whichever copy holds the Lease, wherever it runs: nothing
    // to refuse here (an answer that no copy leads arrives in the event log).
    let origin = Origin::Live {
        reconciling: reconcile,
        refusal: None,
    };
    let snapshot = state.snapshot.clone();
    Data {
        context: context.to_string(),
        settings: Some(judged),
        ..Data::prepare(origin, state, snapshot, &opts)
    }
}

/// While the API server does not answer (`state` says so), the data last analysed (`last`)
/// with the controller's new state: the tree stays the state seen before the outage and the
/// view says since when it is unreachable, instead of drawing a cluster the outage emptied
/// (counts of zero, a Lease gone vacant because nobody could read its renewals). `None`
/// while it answers: analyse `state`.
pub fn while_unreachable(state: &Arc<LiveState>, last: Option<&Data>) -> Option<Data> {
    let unreachable = matches!(
        state.connection,
        crate::controller::Connection::Unreachable { .. }
    );
    let last = last.filter(|_| unreachable)?;
    // The Lease too as it was seen then: renewals this copy cannot see are no news.
    let live = LiveState {
        lease: last.live.lease.clone(),
        ..LiveState::clone(state)
    };
    Some(Data {
        live: Arc::new(live),
        ..last.clone()
    })
}

/// The live view while it starts: an empty tree, and which attempt this is (after a failure:
/// why, and when the next one starts). `now` is the clock the header's countdown reads.
pub fn connecting(context: &str, reconcile: bool, at: Connecting, now: DateTime<Utc>) -> Data {
    let snapshot = Snapshot {
        now: Some(now),
        ..Snapshot::default()
    };
    let refusal = format!("not connected to {context} yet: nothing to send the request to");
    Data {
        connecting: Some(at),
        ..not_running(context, reconcile, refusal, LiveState::default(), snapshot)
    }
}

/// Data that says the cluster cannot be shown, and why (the kubeconfig: retrying would read
/// the same file; a server without VAP v1, `NotServed`).
pub fn unavailable(
    context: &str,
    reconcile: bool,
    resource: &str,
    kind: AccessErrorKind,
    message: String,
) -> Data {
    let live = LiveState {
        access_errors: vec![AccessError {
            resource: resource.to_string(),
            kind,
            message,
        }],
        ..LiveState::default()
    };
    let refusal = "not connected".to_string();
    not_running(context, reconcile, refusal, live, Snapshot::default())
}

/// The data of a live view with no reconciler to show: `live` says why, `refusal` why no
/// request can be sent.
fn not_running(
    context: &str,
    reconcile: bool,
    refusal: String,
    live: LiveState,
    snapshot: Snapshot,
) -> Data {
    let origin = Origin::Live {
        reconciling: reconcile,
        refusal: Some(refusal),
    };
    let opts = crate::load::cel::default_options();
    Data {
        context: context.to_string(),
        ..Data::prepare(origin, Arc::new(live), Arc::new(snapshot), &opts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::{FailedWrite, LeaderHealth, LeaseInfo};
    use crate::core::settings::Judged;
    use crate::tui::model::data::access_label;

    /// What the TUI shows of `state`, judged by the default flags.
    fn data_of(state: LiveState) -> Data {
        data_from_live(
            Arc::new(state),
            "ctx",
            false,
            &crate::load::cel::default_options(),
        )
    }

    #[test]
    fn the_tree_is_judged_by_the_leaders_settings_and_says_so() {
        use crate::core::FailurePolicy;
        use crate::core::settings::Settings;
        let leaders = Options {
            default_failure_policy: FailurePolicy::Ignore,
            ..crate::load::cel::default_options()
        };
        let mut state = LiveState {
            lease: LeaseInfo {
                lease: "gatekeeper-system/kubectl-vap".into(),
                identity: "laptop-1".into(),
                holder: Some("leader-1".into()),
                health: Some(LeaderHealth {
                    settings: Some(Settings::of(&leaders)),
                    ..LeaderHealth::default()
                }),
                ..LeaseInfo::default()
            },
            ..LiveState::default()
        };
        let data = data_of(state.clone());
        assert_eq!(data.opts.default_failure_policy, FailurePolicy::Ignore);
        let Some(Judged::Leader {
            holder,
            differences,
            ..
        }) = &data.settings
        else {
            panic!("the leader's: {:?}", data.settings)
        };
        assert_eq!(holder, "leader-1");
        assert_eq!(
            differences
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["--default-failure-policy Fail (leader: Ignore) — judged by the leader's"]
        );
        // The holder stopped renewing: local flags, labelled, never the stale leader's.
        state.lease.vacant = true;
        let data = data_of(state);
        assert_eq!(data.opts.default_failure_policy, FailurePolicy::Fail);
        assert!(matches!(
            &data.settings,
            Some(Judged::Local { why }) if why == "no copy leads: Lease gatekeeper-system/kubectl-vap is vacant"
        ));
    }

    /// The findings of `code` in `data`'s analysis.
    fn of_code(data: &Data, code: crate::core::findings::Code) -> Vec<&crate::core::Finding> {
        let findings = data.analysis.findings.iter();
        findings.filter(|f| f.code == code).collect()
    }

    #[test]
    fn a_failed_write_shows_on_its_objects_finding_and_a_refused_one_is_a_finding() {
        use crate::core::findings::Code;
        // A template that generates and a constraint of its kind, no VAP yet: the analysis
        // finds the constraint's VAP missing (the default shape's, inline).
        let mut snapshot = crate::snapshot::Snapshot::default();
        snapshot
            .insert(
                serde_json::json!({
                    "apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": "K8sX",
                    "metadata": { "name": "c", "uid": "u2" },
                    "spec": { "match": { "kinds": [{ "apiGroups": [""], "kinds": ["ConfigMap"] }] } }
                }),
                crate::model::Source::default(),
            )
            .unwrap();
        snapshot
            .insert(
                serde_json::json!({
                    "apiVersion": "templates.gatekeeper.sh/v1", "kind": "ConstraintTemplate",
                    "metadata": { "name": "k8sx", "uid": "u1" },
                    "spec": { "crd": { "spec": { "names": { "kind": "K8sX" } } },
                              "targets": [{ "target": "admission.k8s.gatekeeper.sh",
                                            "code": [{ "engine": "K8sNativeValidation",
                                                       "source": { "generateVAP": true,
                                                                   "validations": [{ "expression": "true" }] } }] }] }
                }),
                crate::model::Source::default(),
            )
            .unwrap();
        let with = |failed: Option<FailedWrite>| {
            let failed = failed
                .map(|f| {
                    let vap = "ValidatingAdmissionPolicy";
                    (crate::model::ObjectId::new(vap, "gatekeeper-k8sx.c"), f)
                })
                .into_iter()
                .collect();
            data_of(LiveState {
                snapshot: Arc::new(snapshot.clone()),
                failed_writes: Arc::new(failed),
                ..LiveState::default()
            })
        };
        let message = |data: &Data| {
            data.analysis
                .findings
                .iter()
                .find(|f| f.code == Code::PolicyMissing)
                .map(|f| f.message.clone())
                .unwrap()
        };
        assert!(!message(&with(None)).contains("last write failed"));
        let forbidden = with(Some(FailedWrite {
            why: "forbidden: no create".into(),
            refused: false,
            contested: false,
        }));
        assert!(
            message(&forbidden).ends_with("the last write failed: forbidden: no create"),
            "{}",
            message(&forbidden)
        );
        assert!(of_code(&forbidden, Code::WriteRefused).is_empty());
        // Refused (422): the finding says so, and a write-refused error carries the message.
        let why = "compilation failed: undefined field 'typo' (Invalid, 422)";
        let refused = with(Some(FailedWrite {
            why: why.into(),
            refused: true,
            contested: false,
        }));
        assert!(message(&refused).ends_with(&format!("the last write failed: {why}")));
        let found = of_code(&refused, Code::WriteRefused);
        assert_eq!(found.len(), 1, "{:?}", refused.analysis.findings);
        assert_eq!(found[0].object.name, "gatekeeper-k8sx.c");
        assert!(found[0].message.contains("undefined field 'typo'"));
        assert!(refused.summary.errors >= 2, "{:?}", refused.summary);
        // On the VAP's node, as every other finding is on its object's: the badges add up to
        // the header's counts (issue 42: 5 errors in the header, 4 in the badges).
        let on_nodes = |data: &Data| -> usize {
            let nodes = data.analysis.tree.iter().flat_map(|n| n.walk());
            nodes.map(|n| n.findings.len()).sum()
        };
        assert_eq!(on_nodes(&refused), refused.analysis.findings.len());
        // Contested by another writer: not a failed write but a write not sent, and an error
        // of its own (the alert), naming the other writer.
        let why = "another writer (field manager \"manager\") undid this copy's writes";
        let contested = with(Some(FailedWrite {
            why: why.into(),
            refused: false,
            contested: true,
        }));
        assert!(message(&contested).ends_with(&format!("not written now: {why}")));
        let found = of_code(&contested, Code::WriterConflict);
        assert_eq!(found.len(), 1, "{:?}", contested.analysis.findings);
        assert!(found[0].message.contains("\"manager\""));
        assert!(contested.summary.errors >= 2, "{:?}", contested.summary);
        assert_eq!(on_nodes(&contested), contested.analysis.findings.len());
    }

    #[test]
    fn requests_are_not_refused_once_connected() {
        let refusal = |state: &LiveState, reconcile: bool| {
            data_from_live(
                Arc::new(state.clone()),
                "ctx",
                reconcile,
                &crate::load::cel::default_options(),
            )
            .write_refusal()
        };
        let mut state = LiveState {
            writes_enabled: true,
            lease: LeaseInfo {
                holder: Some("other".into()),
                ..LeaseInfo::default()
            },
            ..LiveState::default()
        };
        // Observing, standby, leading: the request goes to the holder, wherever it runs.
        assert_eq!(refusal(&state, false), None);
        assert_eq!(refusal(&state, true), None);
        state.lease.leading = true;
        assert_eq!(refusal(&state, true), None);
        // Gatekeeper's generator is said, not a reason to refuse (the leader decides).
        state.writes_enabled = false;
        state.gatekeeper_generator = Some("gatekeeper-controller --default-create-vap".into());
        assert_eq!(refusal(&state, true), None);
        // Before the live view runs there is nothing to send to.
        let at = Connecting {
            attempt: 1,
            retry_at: None,
            message: None,
        };
        let waiting = connecting("ctx", false, at, Utc::now());
        assert!(
            waiting
                .write_refusal()
                .is_some_and(|r| r.contains("not connected to ctx"))
        );
    }

    #[test]
    fn access_errors_keep_their_meaning() {
        let error = |resource: &str, kind| AccessError {
            resource: resource.into(),
            kind,
            message: "m".into(),
        };
        let data = data_of(LiveState {
            access_errors: vec![
                error(
                    "validatingadmissionpolicies.admissionregistration.k8s.io",
                    AccessErrorKind::NotServed,
                ),
                error(
                    "constrainttemplates.templates.gatekeeper.sh",
                    AccessErrorKind::NotServed,
                ),
                error(
                    "validatingadmissionpolicybindings.admissionregistration.k8s.io",
                    AccessErrorKind::Forbidden,
                ),
            ],
            ..LiveState::default()
        });
        let kinds: Vec<_> = data.live.access_errors.iter().map(access_label).collect();
        assert_eq!(
            kinds,
            vec!["API disabled", "not installed", "restricted (403)"]
        );
        assert!(!data.live.synced);
    }
}
