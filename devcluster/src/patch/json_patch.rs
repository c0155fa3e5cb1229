//! RFC 6902 JSON patch operations (`add`, `remove`, `replace`, `move`, `copy`, `test`) over
//! RFC 6901 JSON pointers.

use serde_json::Value;

/// Splits a JSON pointer into unescaped reference tokens.
fn pointer_tokens(pointer: &str) -> std::result::Result<Vec<String>, String> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let rest = pointer
        .strip_prefix('/')
        .ok_or_else(|| format!("invalid pointer {pointer:?}"))?;
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn parent_and_last<'a>(
    doc: &'a mut Value,
    pointer: &str,
) -> std::result::Result<(&'a mut Value, String), String> {
    let mut tokens = pointer_tokens(pointer)?;
    let last = tokens
        .pop()
        .ok_or("the root cannot be the target of this operation")?;
    let mut current = doc;
    for token in tokens {
        current = match current {
            Value::Object(map) => map.get_mut(&token),
            Value::Array(list) => token.parse::<usize>().ok().and_then(|i| list.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| format!("path {pointer:?} does not exist"))?;
    }
    Ok((current, last))
}

fn add(doc: &mut Value, path: &str, value: Value) -> std::result::Result<(), String> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = parent_and_last(doc, path)?;
    match parent {
        Value::Object(map) => {
            map.insert(last, value);
        }
        Value::Array(list) if last == "-" => list.push(value),
        Value::Array(list) => {
            let i = last
                .parse::<usize>()
                .ok()
                .filter(|i| *i <= list.len())
                .ok_or("array index out of range")?;
            list.insert(i, value);
        }
        _ => return Err(format!("cannot add to a scalar at {path:?}")),
    }
    Ok(())
}

fn remove(doc: &mut Value, path: &str) -> std::result::Result<Value, String> {
    let (parent, last) = parent_and_last(doc, path)?;
    match parent {
        Value::Object(map) => map.remove(&last),
        Value::Array(list) => last
            .parse::<usize>()
            .ok()
            .filter(|i| *i < list.len())
            .map(|i| list.remove(i)),
        _ => None,
    }
    .ok_or_else(|| format!("path {path:?} does not exist"))
}

pub(super) fn apply_op(doc: &mut Value, op: &Value) -> std::result::Result<(), String> {
    let field = |name: &str| {
        op.get(name)
            .and_then(Value::as_str)
            .ok_or(format!("missing {name:?}"))
    };
    let path = field("path")?;
    let value = || {
        op.get("value")
            .cloned()
            .ok_or("missing \"value\"".to_string())
    };
    match field("op")? {
        "add" => add(doc, path, value()?),
        "remove" => remove(doc, path).map(|_| ()),
        "replace" => {
            remove(doc, path)?;
            add(doc, path, value()?)
        }
        "move" => {
            let moved = remove(doc, field("from")?)?;
            add(doc, path, moved)
        }
        "copy" => {
            let copied = doc
                .pointer(field("from")?)
                .cloned()
                .ok_or("\"from\" does not exist")?;
            add(doc, path, copied)
        }
        "test" => match doc.pointer(path) {
            Some(actual) if *actual == value()? => Ok(()),
            _ => Err(format!("test failed at {path:?}")),
        },
        other => Err(format!("unknown operation {other:?}")),
    }
}
