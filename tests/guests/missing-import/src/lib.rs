//! Imports an interface the host does not provide (`wasmformer:plugin/secrets`), besides the
//! real handler contract: loading it must fail with the import named.

wit_bindgen::generate!({
    path: "../../../wit",
    inline: "
        package test:missing;
        interface secrets { reveal: func(name: string) -> string; }
        world plugin {
            import secrets;
            include wasmformer:plugin/plugin@0.3.3;
        }
    ",
    world: "test:missing/plugin",
    generate_all,
});

struct Plugin;

impl exports::wasmformer::plugin::handler::Guest for Plugin {
    fn init(_config: String) -> Result<(), String> {
        let _ = test::missing::secrets::reveal("token");
        Ok(())
    }
    fn on_add(_: wasmformer::plugin::types::Object, _: bool) -> Result<(), String> {
        Ok(())
    }
    fn on_update(
        _: wasmformer::plugin::types::Object,
        _: wasmformer::plugin::types::Object,
    ) -> Result<(), String> {
        Ok(())
    }
    fn on_delete(_: wasmformer::plugin::types::Object, _: bool) -> Result<(), String> {
        Ok(())
    }
}

export!(Plugin);
