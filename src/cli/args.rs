//! The command line: the design's CLI contract. Connection flags mirror kubectl's.

use crate::core::{Exemptions, FailurePolicy, Options, PolicyShape};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "kubectl-vap",
    bin_name = "kubectl vap",
    version,
    about = "Gatekeeper ConstraintTemplates as ValidatingAdmissionPolicies: a race-free generator, a TUI and CI checks",
    long_about = None,
    // Ours lists topics too (`kubectl vap help prerequisites`).
    disable_help_subcommand = true,
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Log filter (tracing syntax), e.g. `info`, `kubectl_vap=debug`. Default: warn (info for `run`).
    #[arg(long, global = true, env = "KUBECTL_VAP_LOG")]
    pub log: Option<String>,
    /// Colour in logs, errors and the TUI: `auto` (on a terminal, unless $NO_COLOR is set and
    /// not empty), `always` or `never`.
    #[arg(long, global = true, value_name = "WHEN", value_enum, default_value_t = ColorWhen::Auto)]
    pub color: ColorWhen,
    /// The TUI's flags (no subcommand).
    #[command(flatten)]
    pub tui: TuiArgs,
    /// kubectl's connection flags. Parsed here: the TUI's, or given before a command; after
    /// [`Cli::parse_args`], the ones in effect (those given after the command win).
    #[command(flatten)]
    pub conn: ConnectionArgs,
    /// The generation flags typed after the command (names without `--`), as
    /// [`Cli::parse_args`] read them: `plan` previews them over the leader's settings.
    #[arg(skip)]
    pub typed_generation_flags: Vec<String>,
}

/// The generation flags given on the command line in `matches` (a subcommand's), by their long
/// names: what a user typed, not what a default or the environment filled.
fn typed_generation_flags(matches: &clap::ArgMatches) -> Vec<String> {
    use clap::parser::ValueSource;
    let generation = GenerationArgs::augment_args(clap::Command::new("generation"));
    let typed = generation.get_arguments().filter(|arg| {
        let id = arg.get_id().as_str();
        // A subcommand without the group has no such id: `try_contains_id` says so.
        matches.try_contains_id(id).is_ok()
            && matches.value_source(id) == Some(ValueSource::CommandLine)
    });
    typed
        .filter_map(|arg| arg.get_long().map(str::to_string))
        .collect()
}

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorWhen {
    Auto,
    Always,
    Never,
}

impl ColorWhen {
    /// Whether to write colour on a stream that is (or is not) a terminal: `--color` wins,
    /// then NO_COLOR (<https://no-color.org>: set and not empty), then the terminal.
    pub fn colour(self, terminal: bool) -> bool {
        match self {
            ColorWhen::Always => true,
            ColorWhen::Never => false,
            ColorWhen::Auto => terminal && !no_color_env(),
        }
    }

    /// `--color` as typed, read before clap parses (so clap's own usage errors and help
    /// follow it too); the last one given wins, as clap takes it.
    pub fn from_args(args: &[std::ffi::OsString]) -> ColorWhen {
        let mut when = ColorWhen::Auto;
        let mut iter = args.iter().map(|a| a.to_string_lossy());
        while let Some(arg) = iter.next() {
            if arg == "--" {
                break;
            }
            let value = match arg.strip_prefix("--color") {
                Some(rest) if rest.starts_with('=') => Some(rest[1..].to_string()),
                Some("") => iter.next().map(|v| v.into_owned()),
                _ => None,
            };
            if let Some(v) = value.and_then(|v| ColorWhen::from_str(&v, false).ok()) {
                when = v;
            }
        }
        when
    }
}

/// NO_COLOR set to anything but the empty string.
pub fn no_color_env() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

/// `kubectl vap` without a command: the TUI.
#[derive(Debug, Args, Clone)]
pub struct TuiArgs {
    /// No write actions (replay, reconcile).
    #[arg(long)]
    pub readonly: bool,
    /// Run the embedded reconciler (it competes for the lease like any copy).
    #[arg(long)]
    pub reconcile: bool,
    #[command(flatten)]
    pub input: InputArgs,
    #[command(flatten)]
    pub gen_flags: GenerationArgs,
    #[command(flatten)]
    pub lease: LeaseArgs,
}

impl Command {
    /// The command's name as typed (`check`, `run`, …), for the User-Agent.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Check(_) => "check",
            Command::Plan(_) => "plan",
            Command::Render(_) => "render",
            Command::Run(_) => "run",
            Command::Replay { .. } => "replay",
            Command::Reconcile { .. } => "reconcile",
            Command::Install(_) => "install",
            Command::Test(_) => "test",
            Command::Audit(_) => "audit",
            Command::Version { .. } => "version",
            Command::Completion { .. } => "completion",
            Command::Help { .. } => "help",
        }
    }
}

impl Cli {
    /// The command line, parsed; a usage error exits 3 (`exit::TABLE`). The TUI's flags belong
    /// to the TUI: `kubectl vap -f x check` is refused, not read as check's input nor ignored.
    /// kubectl's connection flags and `--log` go before or after the command; a command that
    /// connects to nothing refuses connection flags.
    pub fn parse_args() -> Self {
        use clap::{FromArgMatches, parser::ValueSource};
        let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
        let colour = match ColorWhen::from_args(&args) {
            ColorWhen::Always => clap::ColorChoice::Always,
            ColorWhen::Never => clap::ColorChoice::Never,
            ColorWhen::Auto if no_color_env() => clap::ColorChoice::Never,
            ColorWhen::Auto => clap::ColorChoice::Auto,
        };
        let mut cmd = Cli::clap_command().color(colour);
        let matches = cmd
            .try_get_matches_from_mut(args)
            .unwrap_or_else(|e| super::exit::exit_on_clap_error(e));
        if let Some(sub) = matches.subcommand_name() {
            let tui = TuiArgs::augment_args(clap::Command::new("tui"));
            for arg in tui.get_arguments() {
                let id = arg.get_id().as_str();
                if matches.value_source(id) == Some(ValueSource::CommandLine) {
                    let flag = arg
                        .get_long()
                        .map_or_else(|| id.to_string(), |l| format!("--{l}"));
                    super::exit::exit_on_clap_error(cmd.error(
                        clap::error::ErrorKind::ArgumentConflict,
                        format!(
                            "{flag} before the command is the TUI's; for `{sub}`, give it after the command (`kubectl vap {sub} {flag} …`) if `kubectl vap {sub} --help` lists it"
                        ),
                    ));
                }
            }
        }
        let mut cli =
            Cli::from_arg_matches(&matches).unwrap_or_else(|e| super::exit::exit_on_clap_error(e));
        if let Some((_, sub)) = matches.subcommand() {
            cli.typed_generation_flags = typed_generation_flags(sub);
        }
        let before = std::mem::take(&mut cli.conn);
        let after = cli.command_conn().cloned().unwrap_or_default();
        cli.conn = after.over(&before);
        if let Some(why) = cli.connects_to_nothing()
            && let Some(flag) = cli.conn.given().first()
        {
            super::exit::exit_on_clap_error(cmd.error(
                clap::error::ErrorKind::ArgumentConflict,
                format!("{flag} is a connection flag, and {why}: it would be ignored"),
            ));
        }
        // The API server refuses groups without a user to impersonate: a usage error here.
        if !cli.conn.as_group.is_empty() && cli.conn.as_user.is_none() {
            super::exit::exit_on_clap_error(cmd.error(
                clap::error::ErrorKind::MissingRequiredArgument,
                "--as-group needs --as (the user to impersonate)",
            ));
        }
        cli
    }

    /// The command line's definition, with the exit-code table under every command's help.
    pub fn clap_command() -> clap::Command {
        use clap::CommandFactory;
        let table = super::exit::TABLE;
        Cli::command()
            .after_help(table)
            .mut_subcommands(|c| c.after_help(table))
    }

    /// The connection flags given after the command, for the commands that take them.
    fn command_conn(&self) -> Option<&ConnectionArgs> {
        match &self.command {
            Some(Command::Check(a)) => Some(&a.conn),
            Some(Command::Plan(a)) => Some(&a.conn),
            Some(Command::Render(a)) => Some(&a.conn),
            Some(Command::Run(a)) => Some(&a.conn),
            Some(Command::Test(a)) => Some(&a.conn),
            Some(Command::Audit(a)) => Some(&a.conn),
            Some(Command::Replay { conn, .. } | Command::Reconcile { conn, .. }) => Some(conn),
            None
            | Some(
                Command::Install(_)
                | Command::Version { .. }
                | Command::Help { .. }
                | Command::Completion { .. },
            ) => None,
        }
    }

    /// Why the command line connects to no cluster (then connection flags are refused), or
    /// `None` when it does.
    pub fn connects_to_nothing(&self) -> Option<&'static str> {
        let files = !self.input().filenames.is_empty();
        match &self.command {
            None if files => Some("`kubectl vap -f` shows files"),
            Some(Command::Check(a)) if files && !a.audit => {
                Some("`check -f` reads files, not a cluster")
            }
            Some(Command::Plan(_)) if files => Some("`plan -f` reads files, not a cluster"),
            Some(Command::Render(_)) if files => Some("`render -f` reads files, not a cluster"),
            Some(Command::Test(a)) if a.offline => Some("`test --offline` sends nothing"),
            Some(Command::Install(_)) => Some("`install` only prints manifests"),
            Some(Command::Version { .. }) => Some("`version` asks no cluster"),
            Some(Command::Help { .. }) => Some("`help` prints text"),
            Some(Command::Completion { .. }) => Some("`completion` prints a script"),
            _ => None,
        }
    }

    /// The `-f` input of the command being run (the TUI's without one); none for commands that
    /// read no files (clap refuses `-f` there).
    pub fn input(&self) -> &InputArgs {
        match &self.command {
            None => &self.tui.input,
            Some(Command::Check(a)) => &a.input,
            Some(Command::Plan(a)) => &a.input,
            Some(Command::Render(a)) => &a.input,
            Some(Command::Test(a)) => &a.input,
            Some(_) => &NO_INPUT,
        }
    }

    /// The generation flags of the command being run (the TUI's without one). Commands that
    /// generate nothing (audit, install, version) have none and get Gatekeeper's defaults.
    pub fn gen_flags(&self) -> &GenerationArgs {
        match &self.command {
            None => &self.tui.gen_flags,
            Some(Command::Check(a)) => &a.gen_flags,
            Some(Command::Plan(a)) => &a.gen_flags,
            Some(Command::Render(a)) => &a.gen_flags,
            Some(Command::Test(a)) => &a.gen_flags,
            Some(Command::Run(a)) => &a.gen_flags,
            Some(Command::Replay { gen_flags, .. } | Command::Reconcile { gen_flags, .. }) => {
                gen_flags
            }
            Some(
                Command::Audit(_)
                | Command::Install(_)
                | Command::Version { .. }
                | Command::Help { .. }
                | Command::Completion { .. },
            ) => &DEFAULT_GEN,
        }
    }

    /// The generation options of the command line (the Lease's namespace exempt).
    pub fn generation_options(&self) -> Options {
        self.gen_flags().options(&self.lease().lease_namespace)
    }

    /// The Lease flags of the command being run (the TUI's without one); the defaults for the
    /// commands that do not use the Lease.
    pub fn lease(&self) -> &LeaseArgs {
        match &self.command {
            None => &self.tui.lease,
            Some(Command::Run(a)) => &a.lease,
            // check and plan judge a live cluster by the settings its leader publishes there.
            Some(Command::Check(a)) => &a.lease,
            Some(Command::Plan(a)) => &a.lease,
            Some(Command::Render(a)) => &a.lease,
            Some(Command::Replay { lease, .. } | Command::Reconcile { lease, .. }) => lease,
            Some(_) => &DEFAULT_LEASE,
        }
    }
}

static NO_INPUT: InputArgs = InputArgs {
    filenames: Vec::new(),
    max_input_bytes: 0,
};

/// Defaults as clap would fill them in, so no second copy of them is kept here.
static DEFAULT_GEN: std::sync::LazyLock<GenerationArgs> = std::sync::LazyLock::new(|| {
    #[derive(Parser)]
    struct Only {
        #[command(flatten)]
        g: GenerationArgs,
    }
    Only::parse_from(["kubectl-vap"]).g
});

static DEFAULT_LEASE: std::sync::LazyLock<LeaseArgs> = std::sync::LazyLock::new(|| LeaseArgs {
    lease_namespace: crate::controller::DEFAULT_LEASE_NAMESPACE.to_string(),
    lease_name: crate::controller::DEFAULT_LEASE_NAME.to_string(),
});

/// The leader-election Lease: the commands that lead or ask the leader.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Leader election")]
pub struct LeaseArgs {
    /// Namespace of the leader-election Lease.
    #[arg(long, default_value = crate::controller::DEFAULT_LEASE_NAMESPACE)]
    pub lease_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = crate::controller::DEFAULT_LEASE_NAME)]
    pub lease_name: String,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Report findings: exit 0 when clean, 1 on any warning or error, 2 when it cannot tell
    /// (bad input, an API server that does not answer or forbids, no ConstraintTemplate CRD),
    /// 3 on a usage error.
    Check(CheckArgs),
    /// Show the writes the reconciler would make now, each with a diff.
    Plan(PlanArgs),
    /// Print the objects the reconciler would hold as manifests (--static: static admission
    /// manifests). Exit 1 when something selected cannot be rendered, 2 when it cannot tell
    /// (bad input, an unreadable cluster), 3 on a usage error.
    ///
    /// The constraint CRDs, VAPs and bindings, with their labels and owners, from the cluster
    /// or -f files; same input, same bytes. With --static, the selected constraints as static
    /// admission manifests for kube-apiserver's staticManifestsDir (Kubernetes 1.36+), and the
    /// AdmissionConfiguration that loads them. What cannot be rendered is said on stderr as
    /// `check` says it; a name that selects nothing exits 2.
    Render(RenderArgs),
    /// Run the shared-cache reconciler (leader-elected).
    Run(RunArgs),
    /// Re-enqueue every constraint of TEMPLATE's kind (the TUI's `p`).
    Replay {
        /// The ConstraintTemplate name.
        template: String,
        #[command(flatten)]
        gen_flags: GenerationArgs,
        #[command(flatten)]
        lease: LeaseArgs,
        #[command(flatten)]
        conn: ConnectionArgs,
    },
    /// Reconcile TEMPLATE (its CRD, VAP and bindings), or everything with --all (the TUI's
    /// `r`/`R`).
    #[command(group(clap::ArgGroup::new("what").required(true).args(["template", "all"])))]
    Reconcile {
        /// The ConstraintTemplate name.
        template: Option<String>,
        /// Reconcile every template and constraint (a full resync).
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        gen_flags: GenerationArgs,
        #[command(flatten)]
        lease: LeaseArgs,
        #[command(flatten)]
        conn: ConnectionArgs,
    },
    /// Print the in-cluster manifests (Deployment, PodDisruptionBudget, ServiceAccount,
    /// least-privilege RBAC), to apply with kubectl.
    Install(InstallArgs),
    /// Dry-run manifests (-f) through the cluster's admission chain; every verdict attributed
    /// binding → constraint → template. Exit 0 admitted, 1 denied or warned, 2 bad input.
    Test(TestArgs),
    /// Dry-run a no-op update of every existing object in each binding's scope; violations per
    /// constraint. Exit 0 none, 1 violations, 2 errors, 130 interrupted (partial report).
    Audit(AuditArgs),
    /// Print the version, the build (commit, date, target) and the API versions spoken.
    Version {
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Print a shell completion script for `kubectl-vap` (bash, zsh, fish, powershell,
    /// elvish).
    ///
    /// Load it as each shell does, e.g. `source <(kubectl-vap completion bash)`, or write it
    /// where the shell looks (`kubectl-vap completion zsh > "${fpath[1]}/_kubectl-vap"`). For
    /// `kubectl vap <TAB>`, kubectl (1.26+) asks `kubectl_complete-vap` on PATH instead
    /// (shipped in the krew archive beside the plugin): it completes template, constraint and
    /// context names too.
    Completion {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Help on a command, or on a topic: prerequisites, gatekeeper, rbac, exit-codes.
    Help {
        /// A topic or a command; without one, the topics and commands.
        topic: Option<String>,
    },
}

#[derive(Debug, Args, Clone)]
pub struct InstallArgs {
    /// Print the manifests to stdout (the only mode: apply them with kubectl).
    #[arg(long)]
    pub print: bool,
    /// Namespace to run in (and hold the lease in).
    #[arg(short = 'n', long, default_value = "gatekeeper-system")]
    pub namespace: String,
    /// Container image (`scripts/image` builds it; the default is this version's tag).
    #[arg(long, default_value = super::install::DEFAULT_IMAGE)]
    pub image: String,
    /// Also print a Service for the metrics port (/metrics, /healthz, /readyz).
    #[arg(long)]
    pub metrics_service: bool,
}

#[derive(Debug, Args, Clone)]
pub struct CheckArgs {
    #[command(flatten)]
    pub input: InputArgs,
    #[command(flatten)]
    pub out: ReportOutputArgs,
    /// Also audit existing objects (as `audit` does): an info finding per constraint with
    /// violations, so CI sees what flipping it to deny would break. Needs a cluster.
    #[arg(long)]
    pub audit: bool,
    /// Also judge the static manifests in DIR (written by `render --static`): one that no
    /// longer matches what its constraint renders to is `static-out-of-sync`, one whose
    /// constraint is gone `static-dangling`.
    #[arg(long = "static", value_name = "DIR", conflicts_with = "audit")]
    pub static_dir: Option<std::path::PathBuf>,
    /// After the report, watch the cluster and print a line for each finding as it appears
    /// (`+`) or goes (`-`), until interrupted (as kubectl's -w); exits with the code of what
    /// it showed last. Table output only.
    #[arg(short = 'w', long, conflicts_with_all = ["audit", "static_dir"])]
    pub watch: bool,
    #[command(flatten)]
    pub gen_flags: GenerationArgs,
    #[command(flatten)]
    pub lease: LeaseArgs,
    #[command(flatten)]
    pub conn: ConnectionArgs,
}

#[derive(Debug, Args, Clone)]
pub struct TestArgs {
    #[command(flatten)]
    pub input: InputArgs,
    #[command(flatten)]
    pub out: TextOutputArgs,
    /// Send nothing: say which bindings and constraints in the files select each object.
    #[arg(long)]
    pub offline: bool,
    /// The namespace of objects that name none (as kubectl's -n; default: the context's, then
    /// `default`). An object in another namespace is refused, as kubectl refuses it.
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    #[command(flatten)]
    pub gen_flags: GenerationArgs,
    #[command(flatten)]
    pub conn: ConnectionArgs,
}

#[derive(Debug, Args, Clone)]
pub struct AuditArgs {
    /// A ConstraintTemplate (its name, or its kind in any case), or a constraint (`NAME` or
    /// `Kind/NAME`, the kind in any case); all when absent.
    pub target: Option<String>,
    #[command(flatten)]
    pub out: ReportOutputArgs,
    /// Audit only the objects in this namespace (cluster-scoped objects are then left out).
    /// Default: every namespace and cluster-scoped objects, as Gatekeeper's audit does.
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Every namespace and cluster-scoped objects (the default; as kubectl's -A).
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    pub all_namespaces: bool,
    /// Requests per second, sustained (0: unlimited).
    #[arg(long, default_value_t = 50.0)]
    pub qps: f32,
    /// Requests allowed at once above --qps.
    #[arg(long, default_value_t = 100)]
    pub burst: u32,
    /// Dry-runs in flight at once.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub concurrency: u16,
    #[command(flatten)]
    pub conn: ConnectionArgs,
}

#[derive(Debug, Args, Clone)]
pub struct InputArgs {
    /// Read files instead of a cluster: files, folders (recursive) or `-` for stdin.
    /// Repeatable.
    #[arg(short = 'f', long = "filename", value_name = "PATH")]
    pub filenames: Vec<String>,
    /// With -f: bytes read at most from each file or stdin (e.g. 64Mi, 1Gi); more is an error.
    #[arg(long, value_name = "SIZE", default_value = "64Mi",
          value_parser = crate::load::input::parse_size)]
    pub max_input_bytes: u64,
}

/// kubectl's connection flags: on the commands that connect (the TUI, `check`/`plan` without
/// `-f`, `test` without `--offline`, `audit`, `run`, `replay`, `reconcile`), before or after
/// the command; `version`, `install` and the file-only paths connect to nothing and refuse them
/// (a flag that would be ignored is refused, never ignored).
#[derive(Debug, Args, Clone, Default, PartialEq, Eq)]
#[command(next_help_heading = "Connection (as kubectl's)")]
pub struct ConnectionArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<String>,
    /// The kubeconfig context to use.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// The kubeconfig cluster to use.
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
    /// The kubeconfig user to use.
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// The address and port of the API server (overrides the kubeconfig's; works without one).
    #[arg(short = 's', long, value_name = "URL")]
    pub server: Option<String>,
    /// Bearer token for authentication to the API server (replaces the kubeconfig user's
    /// credentials).
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// Path to a cert file for the certificate authority.
    #[arg(long, value_name = "FILE")]
    pub certificate_authority: Option<String>,
    /// Do not check the server's certificate (insecure).
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
    /// Username to impersonate.
    #[arg(long = "as", value_name = "USER")]
    pub as_user: Option<String>,
    /// Group to impersonate (repeatable; needs --as).
    #[arg(long = "as-group", value_name = "GROUP")]
    pub as_group: Vec<String>,
    /// Timeout of a single API request but a watch, its whole answer included, e.g. 10s, 1m
    /// (unset or 0: 60s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub request_timeout: Option<Duration>,
    /// The command being run, for the User-Agent (set by `dispatch`, not a flag).
    #[arg(skip)]
    pub command: Option<String>,
}

impl ConnectionArgs {
    /// `self` (given after the command) over `before` (given before it): the last one wins,
    /// as kubectl takes a flag given twice.
    fn over(&self, before: &ConnectionArgs) -> ConnectionArgs {
        let pick = |a: &Option<String>, b: &Option<String>| a.clone().or_else(|| b.clone());
        ConnectionArgs {
            kubeconfig: pick(&self.kubeconfig, &before.kubeconfig),
            context: pick(&self.context, &before.context),
            cluster: pick(&self.cluster, &before.cluster),
            user: pick(&self.user, &before.user),
            server: pick(&self.server, &before.server),
            token: pick(&self.token, &before.token),
            certificate_authority: pick(&self.certificate_authority, &before.certificate_authority),
            insecure_skip_tls_verify: self.insecure_skip_tls_verify
                || before.insecure_skip_tls_verify,
            as_user: pick(&self.as_user, &before.as_user),
            as_group: if self.as_group.is_empty() {
                before.as_group.clone()
            } else {
                self.as_group.clone()
            },
            request_timeout: self.request_timeout.or(before.request_timeout),
            command: self.command.clone().or_else(|| before.command.clone()),
        }
    }

    /// The flags given, as `--flag` (none of them has a default, so given means set).
    pub fn given(&self) -> Vec<&'static str> {
        let flags = [
            ("--kubeconfig", self.kubeconfig.is_some()),
            ("--context", self.context.is_some()),
            ("--cluster", self.cluster.is_some()),
            ("--user", self.user.is_some()),
            ("--server", self.server.is_some()),
            ("--token", self.token.is_some()),
            (
                "--certificate-authority",
                self.certificate_authority.is_some(),
            ),
            ("--insecure-skip-tls-verify", self.insecure_skip_tls_verify),
            ("--as", self.as_user.is_some()),
            ("--as-group", !self.as_group.is_empty()),
            ("--request-timeout", self.request_timeout.is_some()),
        ];
        flags
            .into_iter()
            .filter(|(_, given)| *given)
            .map(|(f, _)| f)
            .collect()
    }
}

impl From<&ConnectionArgs> for crate::cluster::client::ConnectionOptions {
    fn from(a: &ConnectionArgs) -> Self {
        crate::cluster::client::ConnectionOptions {
            kubeconfig: a.kubeconfig.clone(),
            context: a.context.clone(),
            cluster: a.cluster.clone(),
            user: a.user.clone(),
            server: a.server.clone(),
            token: a.token.clone(),
            certificate_authority: a.certificate_authority.clone(),
            insecure_skip_tls_verify: a.insecure_skip_tls_verify,
            namespace: None,
            as_user: a.as_user.clone(),
            as_group: a.as_group.clone(),
            request_timeout: a.request_timeout,
            command: a.command.clone(),
        }
    }
}

/// The generation flags: every command that judges or writes what templates generate (the
/// TUI, check, plan, test, run, replay, reconcile) flattens this one group.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Generation")]
pub struct GenerationArgs {
    /// Generate a VAP for templates that leave generateVAP unset.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub default_create_vap_for_templates: bool,
    /// Bind deny/warn/dryrun constraints (scoped ones decide by vap.k8s.io).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub default_create_vap_binding_for_constraints: bool,
    /// failurePolicy when the template's source sets none (Gatekeeper's name for it:
    /// --default-k8s-native-validation-failure-policy).
    #[arg(long, default_value = "Fail", value_parser = ["Fail", "Ignore"],
          alias = "default-k8s-native-validation-failure-policy")]
    pub default_failure_policy: String,
    /// Wait after a constraint CRD is Established before its first binding (e.g. 30s, 0s).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub binding_wait: Duration,
    /// The shape of the generated objects: `auto` (per template: `inline` for a template with
    /// at most 10 constraints, `narrowed` beyond), `inline` (one VAP per constraint, its
    /// parameters written into the CEL: nothing to sync after an API server restart),
    /// `narrowed` (one VAP per template with the constraints as params; each binding its
    /// constraint's kinds and namespaces, each VAP its constraints', exempt namespaces left
    /// out), `gatekeeper` (Gatekeeper v3.23.1's objects byte for byte, as its default
    /// --sync-vap-enforcement-scope=true writes them: each VAP matches what its validating
    /// webhook does) or `gatekeeper-unsynced` (the same with =false: every create and update).
    /// Without it, `$KUBECTL_VAP_POLICY_SHAPE`, then `auto`.
    // The variable is read by us, not by clap: clap's usage lines would show a flag the
    // environment filled as if it had been typed.
    #[arg(long, value_name = "SHAPE",
          value_parser = ["auto", "inline", "narrowed", "gatekeeper", "gatekeeper-unsynced"])]
    pub policy_shape: Option<String>,
    /// Gatekeeper's flag, accepted with --policy-shape gatekeeper: `false` writes Gatekeeper's
    /// objects as it does with --sync-vap-enforcement-scope=false (`gatekeeper-unsynced`).
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    pub sync_vap_enforcement_scope: Option<bool>,
    /// The ValidatingWebhookConfiguration whose webhook validation.gatekeeper.sh Gatekeeper's
    /// shape copies (Gatekeeper's flag of the same name).
    #[arg(long, value_name = "NAME",
          default_value = crate::model::gatekeeper_webhook::DEFAULT_CONFIGURATION_NAME)]
    pub validating_webhook_configuration_name: String,
    /// Gatekeeper's flag (upstream after v3.23.1): every VAP records in the API server's audit
    /// log which constraints evaluated a request (`<VAP>/constraint`), and every binding adds
    /// Audit beside Deny or Warn, so each failed validation is in the audit log too
    /// (`validation.policy.admission.k8s.io/validation_failure`).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, value_name = "BOOL",
          num_args = 0..=1, default_missing_value = "true")]
    pub emit_admission_audit_annotations: bool,
    /// A namespace no generated policy applies to (repeatable; the Lease's namespace and
    /// namespaces labelled admission.gatekeeper.sh/ignore always are).
    #[arg(long = "exempt-namespace", value_name = "NAMESPACE", value_parser = namespace_part)]
    pub exempt_namespace: Vec<String>,
    /// Exempt every namespace whose name starts with this (repeatable).
    #[arg(long = "exempt-namespace-prefix", value_name = "PREFIX", value_parser = namespace_part)]
    pub exempt_namespace_prefix: Vec<String>,
    /// Exempt every namespace whose name ends with this (repeatable).
    #[arg(long = "exempt-namespace-suffix", value_name = "SUFFIX", value_parser = namespace_part)]
    pub exempt_namespace_suffix: Vec<String>,
    /// Where Gatekeeper runs: the namespaces its Config (`config` there) excludes from the
    /// webhook are exempt too, as in Gatekeeper's own VAPs.
    #[arg(long = "gatekeeper-namespace", value_name = "NAMESPACE", default_value = crate::core::options::DEFAULT_GATEKEEPER_NAMESPACE, value_parser = namespace_part)]
    pub gatekeeper_namespace: String,
}

/// A namespace name, or a part of one: lowercase letters, digits and '-', at most 63.
fn namespace_part(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not (part of) a namespace name: lowercase letters, digits and '-', at most 63"
        ))
    }
}

/// The environment variable `--policy-shape` falls back on.
pub const POLICY_SHAPE_ENV: &str = "KUBECTL_VAP_POLICY_SHAPE";

impl GenerationArgs {
    /// What the flags cannot mean together, said before anything runs.
    pub fn validate(&self) -> Result<(), String> {
        let shape = self.shape_named()?;
        match (self.sync_vap_enforcement_scope, shape) {
            (None, _) | (Some(_), PolicyShape::Gatekeeper) => Ok(()),
            (Some(_), shape) => Err(format!(
                "--sync-vap-enforcement-scope is Gatekeeper's and applies to --policy-shape gatekeeper only, not {}",
                shape.as_str()
            )),
        }
    }

    /// The shape named by `--policy-shape`, else by `$KUBECTL_VAP_POLICY_SHAPE`, else `auto`.
    fn shape_named(&self) -> Result<PolicyShape, String> {
        let env = std::env::var(POLICY_SHAPE_ENV)
            .ok()
            .filter(|v| !v.is_empty());
        match self.policy_shape.as_deref().or(env.as_deref()) {
            None => Ok(PolicyShape::Auto),
            Some(name) => PolicyShape::parse(name).ok_or_else(|| {
                let all: Vec<&str> = PolicyShape::ALL.iter().map(|p| p.as_str()).collect();
                format!(
                    "{POLICY_SHAPE_ENV}={name} is not a shape (one of: {})",
                    all.join(", ")
                )
            }),
        }
    }

    /// The shape the flags ask for (`--sync-vap-enforcement-scope=false` with `gatekeeper`:
    /// `gatekeeper-unsynced`).
    fn shape(&self) -> PolicyShape {
        match (
            self.shape_named().unwrap_or_default(),
            self.sync_vap_enforcement_scope,
        ) {
            (PolicyShape::Gatekeeper, Some(false)) => PolicyShape::GatekeeperUnsynced,
            (shape, _) => shape,
        }
    }

    /// The options, with `lease_namespace` exempt (the reconciler's own Lease and requests).
    pub fn options(&self, lease_namespace: &str) -> Options {
        let mut exempt: std::collections::BTreeSet<String> =
            self.exempt_namespace.iter().cloned().collect();
        exempt.insert(lease_namespace.to_string());
        Options {
            default_create_vap_for_templates: self.default_create_vap_for_templates,
            default_create_vap_binding_for_constraints: self
                .default_create_vap_binding_for_constraints,
            default_failure_policy: FailurePolicy::parse(&self.default_failure_policy)
                .unwrap_or(FailurePolicy::Fail),
            binding_wait: self.binding_wait,
            policy_shape: self.shape(),
            exemptions: Exemptions {
                namespaces: exempt,
                prefixes: self.exempt_namespace_prefix.iter().cloned().collect(),
                suffixes: self.exempt_namespace_suffix.iter().cloned().collect(),
                excluded_globs: Default::default(),
                flagged: self.exempt_namespace.iter().cloned().collect(),
                config_excluded: Default::default(),
            },
            gatekeeper_namespace: self.gatekeeper_namespace.clone(),
            webhook_configuration_name: self.validating_webhook_configuration_name.clone(),
            gatekeeper_webhook: None,
            emit_admission_audit_annotations: self.emit_admission_audit_annotations,
            cel: crate::load::cel::checker(),
        }
    }
}

/// `-o` of the commands that print a table (check, audit): wide adds columns.
#[derive(Debug, Args, Clone)]
pub struct OutputArgs {
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

/// `-o` and `--no-headers` of the reports (`check`, `audit`), with kubectl's meaning.
#[derive(Debug, Args, Clone)]
pub struct ReportOutputArgs {
    /// Output format: table, wide (more columns), json, yaml, name (`kind/name` of each
    /// object the report is about, once a line, as kubectl's -o name), or jsonpath=TEMPLATE
    /// (kubectl's template on the JSON report, e.g. -o 'jsonpath={.findings[*].code}' or
    /// '{range .findings[*]}{.code}{"\n"}{end}').
    #[arg(short = 'o', long = "output", value_name = "FORMAT", default_value = "table",
          value_parser = OutputParser)]
    pub output: super::output::Output,
    /// Table and wide: only the rows, no header line and no summary (as kubectl's).
    #[arg(long)]
    pub no_headers: bool,
}

impl ReportOutputArgs {
    pub fn shown(&self) -> super::output::Shown {
        super::output::Shown {
            output: self.output.clone(),
            no_headers: self.no_headers,
        }
    }
}

/// Parses `-o` of the reports; the fixed names are offered to completion and help.
#[derive(Debug, Clone, Copy)]
struct OutputParser;

impl clap::builder::TypedValueParser for OutputParser {
    type Value = super::output::Output;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Self::Value, clap::Error> {
        let text = value.to_string_lossy();
        super::output::Output::parse(&text).map_err(|why| {
            clap::Error::raw(
                clap::error::ErrorKind::InvalidValue,
                format!("invalid value '{text}' for '--output <FORMAT>': {why}\n"),
            )
            .with_cmd(cmd)
        })
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            ["table", "wide", "json", "yaml", "name"]
                .into_iter()
                .map(clap::builder::PossibleValue::new),
        ))
    }
}

/// `-o` of the commands whose text is not a table (plan's diffs, test's verdicts): no wide.
#[derive(Debug, Args, Clone)]
pub struct TextOutputArgs {
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = TextFormat::Table)]
    pub output: TextFormat,
}

impl TextOutputArgs {
    pub fn format(&self) -> Format {
        match self.output {
            TextFormat::Table => Format::Table,
            TextFormat::Json => Format::Json,
            TextFormat::Yaml => Format::Yaml,
        }
    }
}

/// [`Format`] without wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TextFormat {
    Table,
    Json,
    Yaml,
}

#[derive(Debug, Args, Clone)]
pub struct PlanArgs {
    #[command(flatten)]
    pub input: InputArgs,
    #[command(flatten)]
    pub out: TextOutputArgs,
    /// Exit 1 when writes are planned (as `git diff --exit-code` does), 0 when none.
    #[arg(long)]
    pub exit_code: bool,
    #[command(flatten)]
    pub gen_flags: GenerationArgs,
    #[command(flatten)]
    pub lease: LeaseArgs,
    #[command(flatten)]
    pub conn: ConnectionArgs,
}

/// `render`'s arguments.
#[derive(Debug, Args, Clone)]
pub struct RenderArgs {
    /// What to render: a template by name (its CRD, its VAP and every constraint of its kind)
    /// or a constraint as `Kind/name` (its binding, and its VAP in the inline shape). All
    /// when none.
    pub names: Vec<String>,
    #[command(flatten)]
    pub input: InputArgs,
    /// `yaml` (a stream with a header comment), `json` (a `List`), or `dir=PATH` (one file
    /// per object).
    #[arg(short = 'o', long = "output", default_value = "yaml", value_parser = RenderOutput::parse)]
    pub output: RenderOutput,
    /// One file per object in DIR (the same as `-o dir=DIR`).
    #[arg(long, value_name = "DIR", conflicts_with = "output")]
    pub output_dir: Option<std::path::PathBuf>,
    /// The selected constraints as static manifests for the API server's manifest-based
    /// admission: inline VAPs and bindings named `….static.k8s.io`, and the
    /// AdmissionConfiguration that loads them.
    #[arg(long = "static")]
    pub static_manifests: bool,
    /// With --static: the folder the files will be in on the control-plane nodes, as the
    /// AdmissionConfiguration names it. Default: the output folder if it is absolute, else
    /// /etc/kubernetes/admission/kubectl-vap.
    #[arg(long, value_name = "PATH", requires = "static_manifests")]
    pub static_manifests_dir: Option<String>,
    /// With --static: also write the AdmissionConfiguration that loads them to FILE.
    #[arg(long, value_name = "FILE", requires = "static_manifests")]
    pub admission_config: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub gen_flags: GenerationArgs,
    #[command(flatten)]
    pub lease: LeaseArgs,
    #[command(flatten)]
    pub conn: ConnectionArgs,
}

/// Where `render` writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenderOutput {
    Yaml,
    Json,
    Dir(std::path::PathBuf),
}

impl RenderOutput {
    fn parse(s: &str) -> Result<RenderOutput, String> {
        match s {
            "yaml" => Ok(RenderOutput::Yaml),
            "json" => Ok(RenderOutput::Json),
            _ => match s.strip_prefix("dir=") {
                Some(d) if !d.is_empty() => Ok(RenderOutput::Dir(d.into())),
                _ => Err("one of: yaml, json, dir=PATH".into()),
            },
        }
    }
}

impl RenderArgs {
    /// `-o`, with `--output-dir` as `dir=`.
    pub fn output(&self) -> RenderOutput {
        match &self.output_dir {
            Some(d) => RenderOutput::Dir(d.clone()),
            None => self.output.clone(),
        }
    }
}

/// Defined beside the printers (`output`), which args' report flags use.
pub use super::output::Format;

#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    /// Use the in-cluster config (service account), JSON logs, and serve metrics.
    #[arg(long)]
    pub in_cluster: bool,
    /// Write even though Gatekeeper's own generator looks active.
    #[arg(long)]
    pub take_over: bool,
    /// This copy's account is confined by the guard `install --print` ships
    /// (kubectl-vap-guard): say when that guard is gone, unbound or changed (an error, /readyz
    /// not ready, `check`'s guard-missing). The printed Deployment passes it.
    #[arg(long)]
    pub expect_guard: bool,
    /// Converge once, then exit 0 (or non-zero if it could not).
    #[arg(long)]
    pub once: bool,
    /// Without a right it needs, stay up (unready) and retry until it is granted, instead of
    /// exiting 2 after the first attempt (always so with --in-cluster).
    #[arg(long)]
    pub wait_for_access: bool,
    /// Serve /metrics, /healthz and /readyz here (e.g. 0.0.0.0:8080).
    #[arg(long)]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Reconciles (and so writes) in flight at once; a key is never processed twice at once.
    #[arg(long, default_value_t = crate::controller::DEFAULT_WORKERS as u16,
          value_parser = clap::value_parser!(u16).range(1..=256))]
    pub workers: u16,
    /// The Lease's duration (tests: a short one makes hand-overs quick). Writes stop two thirds
    /// of it after the last successful renewal.
    #[arg(long, hide = true, value_parser = parse_duration)]
    pub lease_duration: Option<Duration>,
    #[command(flatten)]
    pub gen_flags: GenerationArgs,
    #[command(flatten)]
    pub lease: LeaseArgs,
    #[command(flatten)]
    pub conn: ConnectionArgs,
}

/// Parses `30s`, `2m`, `1h`, `500ms` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (e.g. 30s, 2m, 500ms)"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use ms, s, m or h)")),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("{s:?} is not a duration"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
        Cli::clap_command().debug_assert();
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("3d").is_err());
        assert!(parse_duration("x").is_err());
    }
}
