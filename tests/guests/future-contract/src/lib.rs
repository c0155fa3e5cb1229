//! A plugin built for a future contract version, `wasmformer:plugin@0.4.0`, which this host
//! does not accept.

wit_bindgen::generate!({
    inline: "
        package wasmformer:plugin@0.4.0;
        interface handler {
            init: func(config: string) -> result<_, string>;
        }
        world plugin { export handler; }
    ",
});

struct Plugin;

impl exports::wasmformer::plugin::handler::Guest for Plugin {
    fn init(_config: String) -> Result<(), String> {
        Ok(())
    }
}

export!(Plugin);
