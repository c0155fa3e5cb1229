//! Parsing the configuration into its types while collecting every problem with its location.

use std::collections::HashSet;
use std::fmt;
use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::HostConfig;
use super::locate::{Locations, Position};
use super::model::{ClusterConfig, HostSettings, IndexConfig, KindRef, PluginConfig, ResourceRef};
use crate::cache::LabelSelector;

/// One thing wrong with the configuration, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where: `plugins[1].handles[0].labelSelector`.
    pub at: String,
    /// Line and column of that value in the file, where known.
    pub position: Option<Position>,
    /// What is wrong.
    pub message: String,
}

impl Problem {
    /// A problem at `at`.
    pub fn new(at: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            at: at.into(),
            position: None,
            message: message.into(),
        }
    }

    /// Sets the position from the document's `locations` (unless it has one).
    pub fn locate(&mut self, locations: &Locations) {
        self.position = self.position.or_else(|| locations.find(&self.at));
    }
}

impl fmt::Display for Problem {
    /// `7:22: plugins[0].handles[0].labelSelector: invalid label selector …`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(position) = self.position {
            write!(f, "{position}: ")?;
        }
        write!(f, "{}: {}", self.at, self.message)
    }
}

/// Why a configuration file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file has problems; all of them are listed.
    #[error("invalid config {path}:{}", problems.iter().map(|p| format!("\n  {p}")).collect::<String>())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Every problem found.
        problems: Vec<Problem>,
    },
}

/// Decodes `value` into `T`, recording a problem at `at` (plus the inner path) on failure.
fn decode<T: DeserializeOwned>(at: &str, value: &Value, problems: &mut Vec<Problem>) -> Option<T> {
    match serde_path_to_error::deserialize(value) {
        Ok(v) => Some(v),
        Err(e) => {
            let inner = e.path().to_string();
            let at = if inner == "." || inner.is_empty() {
                at.to_owned()
            } else {
                format!("{at}.{inner}")
            };
            problems.push(Problem::new(at, e.into_inner().to_string()));
            None
        }
    }
}

/// Decodes every entry of the list `field` of `plugin` on its own: `None` for an entry that did
/// not decode (its problem is recorded), so the others can still be checked.
fn decode_list<T: DeserializeOwned>(
    at: &str,
    plugin: &Value,
    field: &str,
    problems: &mut Vec<Problem>,
) -> Vec<Option<T>> {
    match plugin.get(field) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| decode(&format!("{at}.{field}[{i}]"), item, problems))
            .collect(),
        Some(_) => {
            problems.push(Problem::new(format!("{at}.{field}"), "expected a list"));
            vec![None]
        }
    }
}

pub(super) fn parse(text: &str, base_dir: PathBuf) -> Result<HostConfig, Vec<Problem>> {
    parse_unlocated(text, base_dir).map_err(|mut problems| {
        let locations = Locations::of(text);
        for problem in &mut problems {
            problem.locate(&locations);
        }
        problems
    })
}

fn parse_unlocated(text: &str, base_dir: PathBuf) -> Result<HostConfig, Vec<Problem>> {
    let doc: Value = crate::yaml::from_str(text).map_err(|e| vec![syntax_problem(&e)])?;
    let Some(top) = doc.as_object() else {
        return Err(vec![Problem::new(
            "(top)",
            "the config must be a map with a `plugins:` list",
        )]);
    };
    let mut problems = Vec::new();
    for key in top
        .keys()
        .filter(|k| !["cluster", "host", "plugins"].contains(&k.as_str()))
    {
        problems.push(Problem::new(
            key.clone(),
            "unknown field, expected one of `cluster`, `host`, `plugins`",
        ));
    }
    let null = Value::Null;
    let section = |key: &str| top.get(key).filter(|v| !v.is_null()).unwrap_or(&null);
    let cluster: Option<ClusterConfig> = if section("cluster").is_null() {
        Some(ClusterConfig::default())
    } else {
        decode("cluster", section("cluster"), &mut problems)
    };
    let host: Option<HostSettings> = if section("host").is_null() {
        Some(HostSettings::default())
    } else {
        decode("host", section("host"), &mut problems)
    };
    if let Some(host) = &host {
        host.leader_election
            .check("host.leaderElection", &mut problems);
        if host.delivery_threads == 0 {
            problems.push(Problem::new("host.deliveryThreads", "must be more than 0"));
        }
    }

    let mut plugins = Vec::new();
    match top.get("plugins").and_then(Value::as_array) {
        None => problems.push(Problem::new("plugins", "missing: list at least one plugin")),
        Some(list) if list.is_empty() => {
            problems.push(Problem::new("plugins", "empty: list at least one plugin"))
        }
        Some(list) => {
            for (i, value) in list.iter().enumerate() {
                if let Some(plugin) = parse_plugin(&format!("plugins[{i}]"), value, &mut problems) {
                    plugins.push(plugin);
                }
            }
        }
    }
    let mut names = HashSet::new();
    for (i, plugin) in plugins.iter().enumerate() {
        if !names.insert(plugin.name.clone()) {
            problems.push(Problem::new(
                format!("plugins[{i}].name"),
                format!("duplicate plugin name {:?}", plugin.name.as_str()),
            ));
        }
    }
    match (cluster, host, problems.is_empty()) {
        (Some(cluster), Some(host), true) => Ok(HostConfig {
            cluster,
            host,
            plugins,
            base_dir,
            path: None,
        }),
        _ => Err(problems),
    }
}

fn parse_plugin(at: &str, value: &Value, problems: &mut Vec<Problem>) -> Option<PluginConfig> {
    if !value.is_object() {
        problems.push(Problem::new(
            at,
            "expected a map with `name`, `wasm` and `handles`",
        ));
        return None;
    }
    // The lists are decoded entry by entry below, so that each entry's problem is reported.
    let mut shell = value.clone();
    for field in ["handles", "read", "indexes"] {
        if let Some(v) = shell.get_mut(field) {
            *v = Value::Array(Vec::new());
        }
    }
    let plugin: Option<PluginConfig> = decode(at, &shell, problems);
    let handles: Vec<Option<ResourceRef>> = decode_list(at, value, "handles", problems);
    let read: Vec<Option<KindRef>> = decode_list(at, value, "read", problems);
    let indexes: Vec<Option<IndexConfig>> = decode_list(at, value, "indexes", problems);
    check_lists(at, &handles, &read, &indexes, problems);
    let (Some(mut plugin), Some(handles), Some(read), Some(indexes)) =
        (plugin, all(handles), all(read), all(indexes))
    else {
        return None;
    };
    (plugin.handles, plugin.read, plugin.indexes) = (handles, read, indexes);
    if !(plugin.config.is_null() || plugin.config.is_object()) {
        problems.push(Problem::new(
            format!("{at}.config"),
            "expected a map (it is passed to the plugin's init as JSON)",
        ));
    }
    if plugin.limits.deadline.is_zero() {
        problems.push(Problem::new(
            format!("{at}.limits.deadline"),
            "must be more than 0s",
        ));
    }
    check_writes(at, &plugin, problems);
    check_reconcile(at, &plugin, problems);
    Some(plugin)
}

/// Checks a plugin's `reconcile:` block.
fn check_reconcile(at: &str, plugin: &PluginConfig, problems: &mut Vec<Problem>) {
    let Some(reconcile) = &plugin.reconcile else {
        return;
    };
    let at = format!("{at}.reconcile");
    for (j, kind) in reconcile.owns.iter().enumerate() {
        check_kind(&format!("{at}.owns[{j}]"), kind, problems);
    }
    let handled: Vec<KindRef> = plugin.handles.iter().map(ResourceRef::kind_ref).collect();
    for (j, watch) in reconcile.watches.iter().enumerate() {
        let here = format!("{at}.watches[{j}]");
        check_kind(&here, &watch.kind_ref(), problems);
        let on_handled = plugin
            .indexes
            .iter()
            .any(|index| index.name == watch.index && handled.contains(&index.kind_ref()));
        if !on_handled {
            problems.push(Problem::new(
                format!("{here}.index"),
                format!(
                    "no index {:?} on a handled kind: add it to `indexes:` on the handled kind, \
                     with a field holding the names of watched objects",
                    watch.index
                ),
            ));
        }
    }
    let backoff = reconcile.backoff;
    if backoff.base.is_zero() {
        problems.push(Problem::new(
            format!("{at}.backoff.base"),
            "must be more than 0s",
        ));
    }
    if backoff.max < backoff.base {
        problems.push(Problem::new(
            format!("{at}.backoff.max"),
            format!(
                "must be at least backoff.base ({})",
                humantime::format_duration(backoff.base)
            ),
        ));
    }
    if !(reconcile.qps.is_finite() && reconcile.qps > 0.0) {
        problems.push(Problem::new(format!("{at}.qps"), "must be more than 0"));
    }
    if reconcile.burst == 0 {
        problems.push(Problem::new(format!("{at}.burst"), "must be more than 0"));
    }
}

/// A YAML syntax error as a problem at its position, on one line.
fn syntax_problem(error: &serde_saphyr::Error) -> Problem {
    let position = error.location().filter(|l| l.line() > 0).map(|l| Position {
        line: l.line(),
        column: l.column(),
    });
    let text = error.to_string();
    let first = text.lines().next().unwrap_or("invalid YAML");
    // `error: line 5 column 3: …`: the position is shown once, as the problem's.
    let message = first.strip_prefix("error: ").unwrap_or(first);
    let message = match message
        .strip_prefix("line ")
        .and_then(|rest| rest.split_once(": "))
    {
        Some((_, rest)) if position.is_some() => rest,
        _ => message,
    }
    .to_owned();
    Problem {
        at: "(syntax)".into(),
        position,
        message,
    }
}

/// Every entry, if all decoded.
fn all<T>(list: Vec<Option<T>>) -> Option<Vec<T>> {
    list.into_iter().collect()
}

/// The entries that decoded, with their positions.
fn decoded<T>(list: &[Option<T>]) -> Vec<(usize, &T)> {
    list.iter()
        .enumerate()
        .filter_map(|(j, e)| Some((j, e.as_ref()?)))
        .collect()
}

/// Checks a plugin's `handles`, `read` and `indexes` entries (those that decoded).
fn check_lists(
    at: &str,
    handles: &[Option<ResourceRef>],
    read: &[Option<KindRef>],
    indexes: &[Option<IndexConfig>],
    problems: &mut Vec<Problem>,
) {
    if handles.is_empty() {
        problems.push(Problem::new(
            format!("{at}.handles"),
            "a plugin handles at least one resource",
        ));
    }
    let (handles, read) = (decoded(handles), decoded(read));
    for &(j, handle) in &handles {
        let here = format!("{at}.handles[{j}]");
        check_kind(&here, &handle.kind_ref(), problems);
        if let Some(selector) = &handle.label_selector
            && let Err(e) = selector.parse::<LabelSelector>()
        {
            problems.push(Problem::new(format!("{here}.labelSelector"), e.to_string()));
        }
        if let Some(selector) = &handle.field_selector
            && let Err(reason) = check_field_selector(selector)
        {
            problems.push(Problem::new(format!("{here}.fieldSelector"), reason));
        }
    }
    for &(j, kind) in &read {
        check_kind(&format!("{at}.read[{j}]"), kind, problems);
    }
    let usable: Vec<KindRef> = handles
        .iter()
        .map(|(_, h)| h.kind_ref())
        .chain(read.iter().map(|(_, k)| (*k).clone()))
        .collect();
    let mut index_names = HashSet::new();
    for (j, index) in decoded(indexes) {
        let here = format!("{at}.indexes[{j}]");
        let kind = index.kind_ref();
        check_kind(&here, &kind, problems);
        if !usable.contains(&kind) {
            problems.push(Problem::new(
                here.clone(),
                format!("index on {kind}, which the plugin neither handles nor reads"),
            ));
        }
        if !index_names.insert((kind.to_string(), index.name.clone())) {
            problems.push(Problem::new(
                format!("{here}.name"),
                format!("duplicate index name {:?} on {kind}", index.name),
            ));
        }
    }
}

/// Checks a plugin's `write:` grants and write limits.
fn check_writes(at: &str, plugin: &PluginConfig, problems: &mut Vec<Problem>) {
    for (j, grant) in plugin.write.iter().enumerate() {
        let here = format!("{at}.write[{j}]");
        if grant.api_version.trim().is_empty() {
            problems.push(Problem::new(
                format!("{here}.apiVersion"),
                "must not be empty",
            ));
        }
        if grant.kind.trim().is_empty() {
            problems.push(Problem::new(format!("{here}.kind"), "must not be empty"));
        }
        if grant.verbs.is_empty() {
            problems.push(Problem::new(
                format!("{here}.verbs"),
                "list at least one of apply, patch, create, delete",
            ));
        }
        if grant.gvk().group == "events.k8s.io"
            || (grant.gvk().group.is_empty() && grant.kind == "Event")
        {
            problems.push(Problem::new(
                here,
                "Events are granted with `events: true`, not `write:`",
            ));
        }
    }
    let limits = &plugin.limits;
    for (field, value) in [
        ("writesPerCall", limits.writes_per_call as u64),
        ("manifestBytes", limits.manifest_bytes as u64),
        ("writeQps", u64::from(limits.write_qps)),
        ("writeBurst", u64::from(limits.write_burst)),
    ] {
        if value == 0 {
            problems.push(Problem::new(
                format!("{at}.limits.{field}"),
                "must be more than 0",
            ));
        }
    }
    if limits.write_timeout.is_zero() {
        problems.push(Problem::new(
            format!("{at}.limits.writeTimeout"),
            "must be more than 0s",
        ));
    }
}

fn check_kind(at: &str, kind: &KindRef, problems: &mut Vec<Problem>) {
    if kind.api_version.trim().is_empty() {
        problems.push(Problem::new(
            format!("{at}.apiVersion"),
            "must not be empty",
        ));
    }
    if kind.kind.is_some() == kind.resource.is_some() {
        problems.push(Problem::new(
            at,
            "name the kind with exactly one of `kind` or `resource`",
        ));
    }
}

/// Field selectors: comma-separated `field=value`, `field==value` or `field!=value`.
fn check_field_selector(selector: &str) -> Result<(), String> {
    selector
        .parse::<crate::cache::FieldSelector>()
        .map(drop)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::informer::ListEncoding;

    /// The problems `parse` finds in `bad`, as `at: message` lines, after checking each is located.
    fn located_problems(bad: &str) -> Vec<String> {
        let problems = HostConfig::parse(bad, PathBuf::new()).unwrap_err();
        assert!(
            problems.iter().all(|p| p.position.is_some()),
            "every problem is located: {problems:#?}"
        );
        problems
            .iter()
            .map(|p| format!("{}: {}", p.at, p.message))
            .collect()
    }

    const GOOD: &str = r#"
host:
  defaultResync: 30s
plugins:
  - name: pod-logger
    wasm: plugins/pod_logger.wasm
    handles:
      - {apiVersion: v1, kind: Pod, namespace: shop, labelSelector: "app=web", fieldSelector: "spec.nodeName=n1"}
    read:
      - {apiVersion: apps/v1, kind: ReplicaSet}
    indexes:
      - {apiVersion: v1, kind: Pod, name: pods-by-node, field: spec.nodeName}
    limits: {deadline: 50ms}
    onSwap: snapshot
    config: {verbose: true}
"#;

    #[test]
    fn parses_a_complete_config_with_defaults() {
        let config = HostConfig::parse(GOOD, PathBuf::from("/etc/wasmformer")).unwrap();
        assert_eq!(config.host.default_resync.as_secs(), 30);
        assert!(config.host.strip_managed_fields);
        let plugin = &config.plugins[0];
        assert_eq!(plugin.name.as_str(), "pod-logger");
        assert_eq!(plugin.limits.deadline.as_millis(), 50);
        assert_eq!(plugin.limits.memory_bytes, 64 << 20);
        assert_eq!(plugin.on_swap, crate::config::SwapMode::Snapshot);
        assert_eq!(plugin.handles[0].namespace.as_deref(), Some("shop"));
        assert_eq!(
            config.wasm_path(plugin),
            PathBuf::from("/etc/wasmformer/plugins/pod_logger.wasm")
        );
    }

    #[test]
    fn reports_every_problem_with_its_location() {
        let bad = r#"
clustr: {}
plugins:
  - name: Pod_Logger
    wasm: a.wasm
    handles:
      - {apiVersion: v1, kind: Pod, labelSelector: "app in web"}
      - {apiVersion: v1, kind: Pod, resource: pods, fieldSelector: "spec.nodeName"}
      - {apiVersion: v1, knd: Pod}
    indexes:
      - {apiVersion: v1, kind: Node, name: x, field: "spec..y"}
  - name: b
    wasm: b.wasm
    handles: []
    limits: {deadline: 0s, memoryByte: 1}
  - {name: c, wasm: c.wasm, handles: [{apiVersion: v1, kind: Pod}], onSwap: rebuild}
"#;
        let text = located_problems(bad);
        let has = |at: &str, what: &str| text.iter().any(|p| p.starts_with(at) && p.contains(what));
        assert!(has("clustr", "unknown field"), "{text:#?}");
        assert!(has("plugins[0].name", "invalid plugin name"), "{text:#?}");
        assert!(
            has(
                "plugins[0].handles[0].labelSelector",
                "invalid label selector"
            ),
            "{text:#?}"
        );
        assert!(
            has(
                "plugins[0].handles[1]",
                "exactly one of `kind` or `resource`"
            ),
            "{text:#?}"
        );
        assert!(
            has(
                "plugins[0].handles[1].fieldSelector",
                "invalid field selector"
            ),
            "{text:#?}"
        );
        assert!(
            has("plugins[0].handles[2]", "unknown field `knd`"),
            "{text:#?}"
        );
        assert!(
            has("plugins[0].indexes[0].field", "invalid field path"),
            "{text:#?}"
        );
        assert!(
            has("plugins[1].limits.memoryByte", "unknown field `memoryByte`"),
            "{text:#?}"
        );
        assert!(
            has("plugins[1].handles", "at least one resource"),
            "{text:#?}"
        );
        assert!(
            has(
                "plugins[2].onSwap",
                "unknown variant `rebuild`, expected `live` or `snapshot`"
            ),
            "{text:#?}"
        );
    }

    #[test]
    fn rejects_duplicate_names_and_indexes_on_unusable_kinds() {
        let dup = r#"
plugins:
  - {name: a, wasm: a.wasm, handles: [{apiVersion: v1, kind: Pod}], indexes: [{apiVersion: v1, kind: Node, name: n, field: spec.x}]}
  - {name: a, wasm: b.wasm, handles: [{apiVersion: v1, kind: Pod}]}
"#;
        let text: Vec<String> = HostConfig::parse(dup, PathBuf::new())
            .unwrap_err()
            .iter()
            .map(|p| format!("{}: {}", p.at, p.message))
            .collect();
        assert!(
            text.iter()
                .any(|p| p.starts_with("plugins[1].name: duplicate plugin name")),
            "{text:#?}"
        );
        assert!(text.iter().any(|p| p.contains("index on v1 Node, which the plugin neither handles nor reads")), "{text:#?}");
    }

    #[test]
    fn delivery_threads_is_read_and_must_be_more_than_zero() {
        let good = GOOD.replace(
            "  defaultResync: 30s",
            "  defaultResync: 30s\n  deliveryThreads: 4",
        );
        let config = HostConfig::parse(&good, PathBuf::new()).unwrap();
        assert_eq!(config.host.delivery_threads, 4);
        let bad = GOOD.replace(
            "  defaultResync: 30s",
            "  defaultResync: 30s\n  deliveryThreads: 0",
        );
        assert_eq!(
            located_problems(&bad),
            ["host.deliveryThreads: must be more than 0"]
        );
    }

    #[test]
    fn list_encoding_defaults_to_protobuf_and_names_its_choices() {
        let config = HostConfig::parse(GOOD, PathBuf::new()).unwrap();
        assert_eq!(config.host.list_encoding, ListEncoding::Protobuf);
        let json = GOOD.replace(
            "  defaultResync: 30s",
            "  defaultResync: 30s\n  listEncoding: json",
        );
        let config = HostConfig::parse(&json, PathBuf::new()).unwrap();
        assert_eq!(config.host.list_encoding, ListEncoding::Json);
        let bad = GOOD.replace(
            "  defaultResync: 30s",
            "  defaultResync: 30s\n  listEncoding: cbor",
        );
        let problems = located_problems(&bad);
        assert!(
            problems.len() == 1
                && problems[0].contains("unknown variant `cbor`, expected `protobuf` or `json`"),
            "{problems:#?}"
        );
    }

    #[test]
    fn keep_resident_bytes_is_read_and_defaults_to_an_empty_plugins_start() {
        let config = HostConfig::parse(GOOD, PathBuf::new()).unwrap();
        assert_eq!(config.host.keep_resident_bytes, 16384);
        let nothing = GOOD.replace(
            "  defaultResync: 30s",
            "  defaultResync: 30s\n  keepResidentBytes: 0",
        );
        let config = HostConfig::parse(&nothing, PathBuf::new()).unwrap();
        assert_eq!(config.host.keep_resident_bytes, 0);
        let bad = GOOD.replace(
            "  defaultResync: 30s",
            "  defaultResync: 30s\n  keepResidentBytes: 16KiB",
        );
        let problems = located_problems(&bad);
        assert!(
            problems.len() == 1 && problems[0].starts_with("host.keepResidentBytes: "),
            "{problems:?}"
        );
    }

    #[test]
    fn syntax_errors_are_reported() {
        let problems = HostConfig::parse("plugins: [", PathBuf::new()).unwrap_err();
        assert_eq!(problems[0].at, "(syntax)");
        assert!(
            HostConfig::parse("plugins: []", PathBuf::new()).unwrap_err()[0]
                .message
                .contains("at least one plugin")
        );
    }

    #[test]
    fn reconcile_is_checked_with_every_problem_located() {
        let bad = r#"
plugins:
  - name: ctl
    wasm: ctl.wasm
    handles: [{apiVersion: apps/v1, kind: Deployment}]
    indexes:
      - {apiVersion: v1, kind: ConfigMap, name: on-a-read-kind, field: data.x}
    read: [{apiVersion: v1, kind: ConfigMap}]
    reconcile:
      owns: [{apiVersion: apps/v1}]
      watches:
        - {apiVersion: v1, kind: ConfigMap, index: deployments-by-configmap}
        - {apiVersion: v1, kind: ConfigMap, index: on-a-read-kind}
      backoff: {base: 0s, max: 1s}
      qps: 0
      burst: 0
  - name: ok
    wasm: ok.wasm
    handles: [{apiVersion: apps/v1, kind: Deployment}]
    indexes:
      - {apiVersion: apps/v1, kind: Deployment, name: by-cm, field: "spec.template.spec.volumes[*].configMap.name"}
    reconcile:
      watches: [{apiVersion: v1, kind: ConfigMap, index: by-cm}]
      backoff: {base: 2s, max: 1s}
      retries: 3
"#;
        let text = located_problems(bad);
        let has = |at: &str, what: &str| text.iter().any(|p| p.starts_with(at) && p.contains(what));
        for (at, what) in [
            (
                "plugins[0].reconcile.owns[0]",
                "exactly one of `kind` or `resource`",
            ),
            (
                "plugins[0].reconcile.watches[0].index",
                "no index \"deployments-by-configmap\" on a handled kind",
            ),
            (
                "plugins[0].reconcile.watches[1].index",
                "no index \"on-a-read-kind\" on a handled kind",
            ),
            ("plugins[0].reconcile.backoff.base", "must be more than 0s"),
            ("plugins[0].reconcile.qps", "must be more than 0"),
            ("plugins[0].reconcile.burst", "must be more than 0"),
            ("plugins[1].reconcile", "unknown field `retries`"),
        ] {
            assert!(has(at, what), "{at}: {what} in {text:#?}");
        }
        let fixed = bad.replace("      retries: 3\n", "");
        let problems = HostConfig::parse(&fixed, PathBuf::new()).unwrap_err();
        assert!(
            problems
                .iter()
                .any(|p| p.at == "plugins[1].reconcile.backoff.max"
                    && p.message == "must be at least backoff.base (2s)"),
            "{problems:#?}"
        );
    }

    #[test]
    fn reconcile_defaults_are_client_gos() {
        let yaml = "plugins:\n  - {name: a, wasm: a.wasm, handles: [{apiVersion: v1, kind: Pod}], reconcile: {}}\n";
        let config = HostConfig::parse(yaml, PathBuf::new()).unwrap();
        let reconcile = config.plugins[0].reconcile.clone().unwrap();
        assert_eq!(reconcile, crate::config::ReconcileConfig::default());
        assert_eq!(
            (
                reconcile.backoff.base,
                reconcile.backoff.max,
                reconcile.qps,
                reconcile.burst
            ),
            (
                std::time::Duration::from_millis(5),
                std::time::Duration::from_secs(1000),
                10.0,
                100
            )
        );
    }
}
