//! `wasmformer rbac`: the RBAC objects exactly a configuration needs, as YAML.
//!
//! Reads (`handles`, `read`, `indexes`): `get`, `list`, `watch`. Writes (`write:`): `apply` needs
//! `patch` and `create` (server-side apply creates missing objects), `patch` → `patch`, `create` →
//! `create`, `delete` → `delete`; `status: true` adds the same verbs on `<resource>/status`.
//! `events: true`: `create` and `patch` on `events.k8s.io` `events` (the recorder patches a
//! repeated Event). What is bound to specific namespaces (`handles[].namespace`,
//! `write[].namespaces`) goes into a Role per namespace; the rest into one ClusterRole. With a
//! ServiceAccount, the bindings to it follow.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::ObjectMeta;
use serde::Serialize;

use crate::config::{HostConfig, KindRef, WriteVerb};

/// A resolved kind: its API group, plural resource name, and whether it is namespaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// API group (empty for core).
    pub group: String,
    /// Plural, e.g. `pods`.
    pub plural: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
}

/// What to print and bind.
#[derive(Debug, Clone)]
pub struct RbacOptions {
    /// The name of the (Cluster)Roles and bindings.
    pub name: String,
    /// The ServiceAccount to bind, if any.
    pub service_account: Option<String>,
    /// The ServiceAccount's namespace.
    pub namespace: String,
}

/// Where a rule applies: everywhere (ClusterRole) or in one namespace (Role).
type Scope = Option<String>;
/// `(scope, group, resource)` → verbs.
type Rules = BTreeMap<(Scope, String, String), BTreeSet<&'static str>>;

/// The RBAC objects `config` needs; `resolve` turns a configured kind into its resource (or says
/// why it cannot).
pub fn objects(
    config: &HostConfig,
    options: &RbacOptions,
    mut resolve: impl FnMut(&KindRef) -> Result<Resource, String>,
) -> Result<Vec<serde_json::Value>, String> {
    let mut rules = Rules::new();
    let mut add = |scope: Scope, resource: &Resource, sub: &str, verbs: &[&'static str]| {
        let scope = if resource.namespaced { scope } else { None };
        rules
            .entry((
                scope,
                resource.group.clone(),
                format!("{}{sub}", resource.plural),
            ))
            .or_default()
            .extend(verbs);
    };
    for plugin in &config.plugins {
        for handle in &plugin.handles {
            let resource = resolve(&handle.kind_ref())?;
            add(
                handle.namespace.clone(),
                &resource,
                "",
                &["get", "list", "watch"],
            );
        }
        for kind in plugin
            .read
            .iter()
            .cloned()
            .chain(plugin.indexes.iter().map(|i| i.kind_ref()))
        {
            add(None, &resolve(&kind)?, "", &["get", "list", "watch"]);
        }
        for grant in &plugin.write {
            let resource = resolve(&grant.kind_ref())?;
            let verbs: BTreeSet<&'static str> = grant
                .verbs
                .iter()
                .flat_map(|verb| match verb {
                    WriteVerb::Apply => &["patch", "create"][..],
                    WriteVerb::Patch => &["patch"][..],
                    WriteVerb::Create => &["create"][..],
                    WriteVerb::Delete => &["delete"][..],
                })
                .copied()
                .collect();
            let verbs: Vec<&'static str> = verbs.into_iter().collect();
            let status_verbs: Vec<&'static str> =
                verbs.iter().copied().filter(|v| *v == "patch").collect();
            let scopes: Vec<Scope> = if grant.namespaces.is_empty() {
                vec![None]
            } else {
                grant.namespaces.iter().cloned().map(Some).collect()
            };
            for scope in scopes {
                add(scope.clone(), &resource, "", &verbs);
                if grant.status && !status_verbs.is_empty() {
                    add(scope, &resource, "/status", &status_verbs);
                }
            }
        }
        if plugin.events {
            add(
                None,
                &Resource {
                    group: "events.k8s.io".into(),
                    plural: "events".into(),
                    namespaced: true,
                },
                "",
                &["create", "patch"],
            );
        }
    }
    if leader_election(config) {
        add(
            Some(config.host.leader_election.namespace.clone()),
            &Resource {
                group: "coordination.k8s.io".into(),
                plural: "leases".into(),
                namespaced: true,
            },
            "",
            lease_verbs(&config.host.leader_election),
        );
    }
    Ok(render(&rules, options))
}

/// Whether the host campaigns for a Lease (`host.leaderElection.enabled`): then it needs
/// `get`, `create`, `patch` and `update` on `coordination.k8s.io` `leases` in the Lease's
/// namespace (and `list`, `watch` with `scope: plugin`).
pub fn leader_election(config: &HostConfig) -> bool {
    config.host.leader_election.enabled
}

/// The verbs on `leases`: kube-lease-manager reads, creates and patches (apply and strategic
/// merge) a Lease; with `scope: plugin` a replica also lists the membership Leases by label
/// (`watch` is granted with `list`, as clients expect).
fn lease_verbs(settings: &crate::config::LeaderElection) -> &'static [&'static str] {
    match settings.scope {
        crate::config::LeaseScope::Host => &["create", "get", "patch", "update"],
        crate::config::LeaseScope::Plugin => &["create", "get", "list", "patch", "update", "watch"],
    }
}

fn rule(group: &str, resource: &str, verbs: &BTreeSet<&'static str>) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(vec![resource.to_owned()]),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        ..Default::default()
    }
}

fn to_value<T: Serialize>(object: T) -> serde_json::Value {
    serde_json::to_value(object).expect("RBAC objects serialise")
}

fn render(rules: &Rules, options: &RbacOptions) -> Vec<serde_json::Value> {
    let mut scopes: BTreeMap<&Scope, Vec<PolicyRule>> = BTreeMap::new();
    for ((scope, group, resource), verbs) in rules {
        scopes
            .entry(scope)
            .or_default()
            .push(rule(group, resource, verbs));
    }
    let subject = options.service_account.as_ref().map(|name| Subject {
        kind: "ServiceAccount".into(),
        name: name.clone(),
        namespace: Some(options.namespace.clone()),
        ..Default::default()
    });
    let mut out = Vec::new();
    for (scope, rules) in scopes {
        let meta = |namespace: Option<String>| ObjectMeta {
            name: Some(options.name.clone()),
            namespace,
            ..Default::default()
        };
        match scope {
            None => {
                out.push(to_value(ClusterRole {
                    metadata: meta(None),
                    rules: Some(rules),
                    ..Default::default()
                }));
                if let Some(subject) = &subject {
                    let role_ref = RoleRef {
                        api_group: "rbac.authorization.k8s.io".into(),
                        kind: "ClusterRole".into(),
                        name: options.name.clone(),
                    };
                    out.push(to_value(ClusterRoleBinding {
                        metadata: meta(None),
                        role_ref,
                        subjects: Some(vec![subject.clone()]),
                    }));
                }
            }
            Some(namespace) => {
                out.push(to_value(Role {
                    metadata: meta(Some(namespace.clone())),
                    rules: Some(rules),
                }));
                if let Some(subject) = &subject {
                    let role_ref = RoleRef {
                        api_group: "rbac.authorization.k8s.io".into(),
                        kind: "Role".into(),
                        name: options.name.clone(),
                    };
                    out.push(to_value(RoleBinding {
                        metadata: meta(Some(namespace.clone())),
                        role_ref,
                        subjects: Some(vec![subject.clone()]),
                    }));
                }
            }
        }
    }
    out
}

/// `objects` as a YAML stream (`---` between documents).
pub fn to_yaml(objects: &[serde_json::Value]) -> String {
    objects
        .iter()
        .map(|o| {
            serde_saphyr::to_string(o).unwrap_or_else(|e| format!("# cannot print as YAML: {e}\n"))
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// The plural kubectl would guess for `kind` (for `--offline`): lowercase, `y` → `ies`,
/// `s`/`x`/`ch`/`sh` → `es`, else `s`.
pub fn guess_plural(kind: &str) -> String {
    let lower = kind.to_lowercase();
    if let Some(stem) = lower
        .strip_suffix('y')
        .filter(|s| !s.ends_with(['a', 'e', 'i', 'o', 'u']))
    {
        return format!("{stem}ies");
    }
    if ["s", "x", "ch", "sh"]
        .iter()
        .any(|end| lower.ends_with(end))
    {
        return format!("{lower}es");
    }
    format!("{lower}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals_as_kubectl_guesses_them() {
        assert_eq!(guess_plural("Pod"), "pods");
        assert_eq!(guess_plural("Ingress"), "ingresses");
        assert_eq!(guess_plural("NetworkPolicy"), "networkpolicies");
        assert_eq!(guess_plural("Gateway"), "gateways");
    }

    #[test]
    fn rules_are_exactly_what_the_config_names() {
        let yaml = r#"
plugins:
  - name: label-sync
    wasm: a.wasm
    handles: [{apiVersion: v1, kind: Namespace}, {apiVersion: v1, kind: Pod, namespace: shop}]
    write:
      - {apiVersion: v1, kind: Pod, verbs: [apply], namespaces: [shop]}
      - {apiVersion: apps/v1, kind: Deployment, verbs: [patch, delete], status: true}
    events: true
"#;
        let config = HostConfig::parse(yaml, "/".into()).unwrap();
        let options = RbacOptions {
            name: "wf".into(),
            service_account: Some("runner".into()),
            namespace: "ops".into(),
        };
        let namespaced = |kind: &str| kind != "Namespace";
        let objects = objects(&config, &options, |k| {
            let kind = k.kind.clone().unwrap();
            Ok(Resource {
                group: k.group_version().0.to_owned(),
                plural: guess_plural(&kind),
                namespaced: namespaced(&kind),
            })
        })
        .unwrap();
        let kinds: Vec<&str> = objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]
        );
        let rules = |i: usize| -> Vec<String> {
            objects[i]["rules"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    format!(
                        "{}/{} {}",
                        r["apiGroups"][0].as_str().unwrap(),
                        r["resources"][0].as_str().unwrap(),
                        r["verbs"]
                    )
                })
                .collect()
        };
        assert_eq!(
            rules(0),
            [
                r#"/namespaces ["get","list","watch"]"#,
                r#"apps/deployments ["delete","patch"]"#,
                r#"apps/deployments/status ["patch"]"#,
                r#"events.k8s.io/events ["create","patch"]"#,
            ]
        );
        assert_eq!(
            rules(2),
            [r#"/pods ["create","get","list","patch","watch"]"#]
        );
        assert_eq!(objects[2]["metadata"]["namespace"], "shop");
        assert_eq!(
            objects[3]["subjects"][0],
            serde_json::json!({"kind": "ServiceAccount", "name": "runner", "namespace": "ops"})
        );
        assert!(to_yaml(&objects).contains("---\n"));
    }

    #[test]
    fn leader_election_adds_the_lease_rules_in_the_lease_namespace() {
        let yaml = r#"
host:
  leaderElection: {enabled: true, namespace: elect}
plugins:
  - name: p
    wasm: a.wasm
    handles: [{apiVersion: v1, kind: ConfigMap}]
"#;
        let options = RbacOptions {
            name: "wf".into(),
            service_account: None,
            namespace: "ops".into(),
        };
        // The Role that grants `leases` for the config `yaml`.
        let lease_role = |yaml: &str| {
            let config = HostConfig::parse(yaml, "/".into()).unwrap();
            objects(&config, &options, |_| {
                Ok(Resource {
                    group: String::new(),
                    plural: "configmaps".into(),
                    namespaced: true,
                })
            })
            .unwrap()
            .into_iter()
            .find(|o| o["rules"][0]["resources"][0] == "leases")
            .expect("a Role for the Lease")
        };
        let role = lease_role(yaml);
        assert_eq!(role["kind"], "Role");
        assert_eq!(role["metadata"]["namespace"], "elect");
        assert_eq!(
            role["rules"][0]["verbs"],
            serde_json::json!(["create", "get", "patch", "update"])
        );
        let plugin_scope = yaml.replace("namespace: elect}", "namespace: elect, scope: plugin}");
        assert_eq!(
            lease_role(&plugin_scope)["rules"][0]["verbs"],
            serde_json::json!(["create", "get", "list", "patch", "update", "watch"]),
            "scope: plugin lists the membership Leases"
        );
    }
}
