//! A plugin built for contract 0.3.0 (before `reconciler` and `retry`), with wit-bindgen and the
//! 0.3.0 interfaces it uses copied inline: the host must keep loading it, in the `plugin` world.
//! On every add it logs `v030 <meta's name field>`; it returns `err("no")` for an object named
//! `fail` (a plain error: never retried).

wit_bindgen::generate!({
    inline: "
        package wasmformer:plugin@0.3.0;
        interface types {
            record object { meta: string, body: string }
        }
        interface log {
            enum level { trace, debug, info, warn, error }
            log: func(level: level, message: string);
        }
        interface handler {
            use types.{object};
            init: func(config: string) -> result<_, string>;
            on-add: func(obj: object, is-in-initial-list: bool) -> result<_, string>;
            on-update: func(old: object, new: object) -> result<_, string>;
            on-delete: func(obj: object, final-state-unknown: bool) -> result<_, string>;
        }
        world plugin { import log; export handler; }
    ",
});

use wasmformer::plugin::{log, types};

struct Plugin;

impl exports::wasmformer::plugin::handler::Guest for Plugin {
    fn init(_config: String) -> Result<(), String> {
        Ok(())
    }
    fn on_add(obj: types::Object, _: bool) -> Result<(), String> {
        let name = obj.meta.split('\0').nth(4).unwrap_or_default().to_owned();
        log::log(log::Level::Info, &format!("v030 {name}"));
        if name == "fail" {
            return Err("no".into());
        }
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
