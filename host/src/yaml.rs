//! YAML decoding as the host reads it everywhere: YAML 1.2 booleans, so `n`, `no`, `on` and
//! `off` stay strings (a label value `no` or an index named `n` must not become `false`).

use serde::de::DeserializeOwned;

/// Decodes YAML (or JSON) text.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, serde_saphyr::Error> {
    let mut options = serde_saphyr::Options::default();
    options.strict_booleans = true;
    serde_saphyr::from_str_with_options(text, options)
}
