//! Makes the writes a ConfigMap's `data` describes, so tests drive every writer call and error:
//! `op` (none, apply, apply-series, create, patch, json-patch, delete, event, raw-apply), `manifest` (JSON, for
//! apply/create; sent as-is by raw-apply), `force`/`status` ("true"), `apiVersion`/`kind`/
//! `namespace`/`name` (patch and delete targets), `body` (patch), `uid`/`resourceVersion` (delete
//! preconditions), `count` (repeat the write), `pad` (bytes added to the manifest as an
//! annotation, to make a large one without a large ConfigMap). A failed write fails the handler with the error's
//! text (with who refused a `forbidden`); a success logs `ok <answer>`. Config
//! `{"writeInInit": true}` makes `init` try an apply and fail with its error; `{"tag": "v2"}`
//! labels every manifest it writes `by: v2` (which version of the probe wrote it).

use std::collections::BTreeMap;

use wasmformer_guest::serde_json::{self, Value};
use wasmformer_guest::writer::{
    self, ApplyOptions, EventType, PatchType, Preconditions, Propagation,
};
use wasmformer_guest::{Error, Gvk, Object, Plugin, Result, info};

#[derive(Default)]
struct Probe {
    tag: Option<String>,
}

fn write(obj: &Object, tag: Option<&str>) -> Result<String> {
    let data: BTreeMap<String, String> = obj
        .decode::<Value>()?
        .get("data")
        .cloned()
        .map(serde_json::from_value)
        .transpose()?
        .unwrap_or_default();
    let get = |k: &str| data.get(k).cloned().unwrap_or_default();
    let manifest = || {
        let mut manifest = serde_json::from_str::<Value>(&get("manifest"))?;
        if let Ok(pad) = get("pad").parse::<usize>() {
            manifest["metadata"]["annotations"]["pad"] = Value::String("x".repeat(pad));
        }
        if let Some(tag) = tag {
            manifest["metadata"]["labels"]["by"] = Value::String(tag.to_owned());
        }
        Ok::<_, serde_json::Error>(manifest)
    };
    let (group, version) = match get("apiVersion").rsplit_once('/') {
        Some((g, v)) => (g.to_owned(), v.to_owned()),
        None => (String::new(), get("apiVersion")),
    };
    let kind = Gvk {
        group,
        version,
        kind: get("kind"),
    };
    let options = ApplyOptions {
        force: get("force") == "true",
        status: get("status") == "true",
    };
    let body = || serde_json::from_str::<Value>(&get("body"));
    let mut last = String::new();
    for _ in 0..get("count").parse::<usize>().unwrap_or(1) {
        last = match get("op").as_str() {
            "none" => String::new(),
            "apply" => writer::apply_with(&manifest()?, options)?,
            "apply-series" => {
                // `count` objects: the manifest's name with `-<i>` appended, data {i: <i>}.
                let mut series = manifest()?;
                let base = series["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                for i in 0..get("count").parse::<usize>().unwrap_or(1) {
                    series["metadata"]["name"] = Value::String(format!("{base}-{i}"));
                    series["data"] = serde_json::json!({"i": i.to_string()});
                    writer::apply(&series)?;
                }
                return Ok(String::new());
            }
            "raw-apply" => writer::apply_json(&get("manifest"), options)?,
            "create" => writer::create(&manifest()?)?,
            "patch" => writer::patch_with(
                &kind,
                &get("namespace"),
                &get("name"),
                PatchType::Merge,
                &body()?,
                options.status,
            )?,
            "json-patch" => writer::patch_with(
                &kind,
                &get("namespace"),
                &get("name"),
                PatchType::Json,
                &body()?,
                options.status,
            )?,
            "delete" => {
                let preconditions = Preconditions {
                    uid: data.get("uid").cloned(),
                    resource_version: data.get("resourceVersion").cloned(),
                };
                writer::delete_with(
                    &kind,
                    &get("namespace"),
                    &get("name"),
                    Propagation::Background,
                    &preconditions,
                )?;
                String::new()
            }
            "event" => {
                writer::event(
                    obj,
                    EventType::Warning,
                    "ProbeReason",
                    "Probe",
                    &get("note"),
                )?;
                String::new()
            }
            other => return Err(Error::msg(format!("unknown op {other:?}"))),
        };
    }
    Ok(last)
}

impl Plugin for Probe {
    fn init(&mut self, config: Value) -> Result<()> {
        self.tag = config.get("tag").and_then(Value::as_str).map(str::to_owned);
        if config.get("writeInInit") == Some(&Value::Bool(true)) {
            writer::apply(
                &serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "default"}}),
            )?;
        }
        Ok(())
    }

    fn on_add(&mut self, obj: &Object, _initial: bool) -> Result<()> {
        if obj.kind().kind != "ConfigMap" || obj.label("probe").is_none() {
            return Ok(());
        }
        let answer = write(obj, self.tag.as_deref())?;
        info!("ok {answer}");
        Ok(())
    }
}

wasmformer_guest::export!(Probe);
