//! A component of another world entirely: it exports a `greet` function, not the handler.

wit_bindgen::generate!({
    inline: "package other:thing; world greeter { export greet: func(who: string) -> string; }",
});

struct Greeter;

impl Guest for Greeter {
    fn greet(who: String) -> String {
        format!("hello {who}")
    }
}

export!(Greeter);
