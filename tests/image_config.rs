//! The image is described three times — the config `scripts/image` builds with, the
//! `Dockerfile` for Docker users, and what `install --print` assumes — and they must agree.
//! No build needed; tests/e2e_image.rs checks the built image itself.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

mod support;

use support::image::{
    ImageFacts, assert_matches_install, dockerfile, parse_dockerfile, script_config,
};

#[test]
fn the_dockerfile_builds_what_scripts_image_builds() {
    let script = ImageFacts::from_config(&script_config());
    let docker = dockerfile();
    assert_eq!(docker.facts.user, script.user, "USER");
    assert_eq!(docker.facts.entrypoint, script.entrypoint, "ENTRYPOINT");
    assert_eq!(docker.facts.cmd, script.cmd, "CMD");
    assert_eq!(docker.facts.ports, script.ports, "EXPOSE");
    assert_eq!(docker.facts.fixed_labels(), script.fixed_labels(), "LABEL");
    // Both label the commit: scripts/image from git, the Dockerfile from a build argument.
    assert!(
        script
            .labels
            .contains_key("org.opencontainers.image.revision")
    );
    assert_eq!(
        docker.facts.labels["org.opencontainers.image.revision"],
        "${REVISION}"
    );
    assert!(docker.args.contains(&"REVISION".to_string()));
    // Nothing but the static binary and the licence on an empty base: no shell.
    assert_eq!(docker.base, "scratch");
    assert_eq!(docker.copies, [script.entrypoint[0].as_str(), "/LICENSE"]);
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Dockerfile"))
        .expect("Dockerfile");
    assert!(text.contains("target-feature=+crt-static") && text.contains("--locked"));
}

#[test]
fn both_match_what_install_print_runs() {
    assert_matches_install(&ImageFacts::from_config(&script_config()), "scripts/image");
    assert_matches_install(&dockerfile().facts, "the Dockerfile");
}

#[test]
fn the_dockerfile_parser_reads_the_final_stage() {
    let d = parse_dockerfile(
        "FROM a AS b\nUSER 1\n# c\nFROM scratch\nARG X=1\nCOPY --from=b /x /y\nUSER 2:2\nEXPOSE 80\n\
         LABEL a=\"b c\" \\\n      d=\"e\"\nENTRYPOINT [\"/y\", \"z\"]\nCMD [\"--q\"]\n",
    );
    assert_eq!(d.base, "scratch");
    assert_eq!(d.facts.user, "2:2");
    assert_eq!(d.facts.ports, ["80/tcp"]);
    assert_eq!(d.facts.labels["a"], "b c");
    assert_eq!(d.facts.labels["d"], "e");
    assert_eq!(d.facts.entrypoint, ["/y", "z"]);
    assert_eq!(d.facts.cmd, ["--q"]);
    assert_eq!(d.copies, ["/y"]);
    assert_eq!(d.args, ["X"]);
}
