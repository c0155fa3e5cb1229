//! A plugin built for contract 0.2.0 (`host/wit-0.2/`, before `writer`), with wit-bindgen
//! directly: the host must keep loading it and answering its lister and log imports. On every add
//! it reads the object back through the lister and logs `legacy <name> lister-rv=<rv>`.

wit_bindgen::generate!({
    path: "../../../host/wit-0.2",
    world: "plugin",
});

use wasmformer::plugin::{lister, log, types};

struct Plugin;

fn field(meta: &str, i: usize) -> &str {
    meta.split('\0').nth(i).unwrap_or_default()
}

impl exports::wasmformer::plugin::handler::Guest for Plugin {
    fn init(_config: String) -> Result<(), String> {
        Ok(())
    }
    fn on_add(obj: types::Object, _: bool) -> Result<(), String> {
        let kind = types::Gvk {
            group: field(&obj.meta, 0).into(),
            version: field(&obj.meta, 1).into(),
            kind: field(&obj.meta, 2).into(),
        };
        let cached = lister::get(&kind, field(&obj.meta, 3), field(&obj.meta, 4))
            .map_err(|e| format!("{e:?}"))?;
        log::log(
            log::Level::Info,
            &format!(
                "legacy {} lister-rv={}",
                field(&obj.meta, 4),
                field(&cached.meta, 6)
            ),
        );
        Ok(())
    }
    fn on_update(_: types::Object, _: types::Object) -> Result<(), String> {
        Ok(())
    }
    fn on_delete(_: types::Object, _: bool) -> Result<(), String> {
        Ok(())
    }
}

export!(Plugin);
