// The Rust writer-probe (tests/guests/writer-probe) in JavaScript: makes the writes a labelled
// ConfigMap's `data` describes, so one replay script drives every writer call in Rust, Python and
// JavaScript and their recorded writes compare equal. `op` is none, apply, create, patch,
// json-patch, delete, event or raw-apply; a failed write logs its error's class, kind and
// refuser, then fails the handler.

import { Plugin, WriteError, exportPlugin, gvk, info, writer } from "wasmformer";

function write(obj) {
  const data = obj.json().data ?? {};
  const get = (k) => data[k] ?? "";
  const kind = gvk(get("apiVersion"), get("kind"));
  const force = get("force") === "true";
  const status = get("status") === "true";
  let last = "";
  for (let i = 0; i < Number(data.count ?? "1"); i++) {
    switch (get("op")) {
      case "none":
        last = "";
        break;
      case "apply":
        last = writer.apply(JSON.parse(get("manifest")), { force, status });
        break;
      case "raw-apply":
        last = writer.apply(get("manifest"), { force, status });
        break;
      case "create":
        last = writer.create(JSON.parse(get("manifest")));
        break;
      case "patch":
        last = writer.patch(kind, get("namespace"), get("name"), JSON.parse(get("body")), { status });
        break;
      case "json-patch":
        last = writer.patch(kind, get("namespace"), get("name"), JSON.parse(get("body")), {
          patchType: "json",
          status,
        });
        break;
      case "delete":
        writer.delete(kind, get("namespace"), get("name"), {
          propagation: "background",
          preconditions: { uid: data.uid, resourceVersion: data.resourceVersion },
        });
        last = "";
        break;
      case "event":
        writer.event(obj, "warning", "ProbeReason", "Probe", get("note"));
        last = "";
        break;
      default:
        throw new TypeError(`unknown op ${JSON.stringify(get("op"))}`);
    }
  }
  return last;
}

class Probe extends Plugin {
  init(config) {
    if (config.writeInInit === true) {
      writer.apply({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "x", namespace: "default" } });
    }
  }

  onAdd(obj, initial) {
    if (obj.kind.kind !== "ConfigMap" || obj.label("probe") === undefined) return;
    let answer;
    try {
      answer = write(obj);
    } catch (e) {
      if (e instanceof WriteError) {
        info(`write failed: ${e.name} kind=${e.kind} refusedBy=${e.refusedBy ?? "-"}`);
      }
      throw e;
    }
    info(`ok ${answer?.metadata?.name ?? ""}`);
  }
}

exportPlugin(Probe);
