//! Registry credentials, from a Docker `config.json`: the file `docker login`, `wkg` and `oras`
//! write, and the `.dockerconfigjson` key of a Kubernetes `kubernetes.io/dockerconfigjson`
//! Secret. Its `auths` (`auth`, or `username` and `password`) and credential helpers
//! (`credsStore`, `credHelpers`) are read by the `docker_credential` crate.

use std::io::BufReader;
use std::path::{Path, PathBuf};

use docker_credential::{CredentialRetrievalError, DockerCredential};
use oci_client::Reference;
use oci_client::secrets::RegistryAuth;

/// The credentials for `reference`'s registry and how they were found (for messages).
///
/// `file` is the configured Docker `config.json` (`host.registryAuth`, `push --registry-auth`);
/// it must exist. Without one, the Docker CLI's own (`$DOCKER_CONFIG/config.json`, else
/// `~/.docker/config.json`) is read when it exists. A file that names no credentials for the
/// registry means anonymous access; a file that cannot be read or decoded is an error.
pub fn credentials(
    file: Option<&Path>,
    reference: &Reference,
) -> Result<(RegistryAuth, String), String> {
    let registry = reference.resolve_registry();
    let (path, configured) = match file {
        Some(file) => (file.to_owned(), true),
        None => match docker_cli_config() {
            Some(path) if path.is_file() => (path, false),
            _ => {
                return Ok((
                    RegistryAuth::Anonymous,
                    format!(
                        "anonymously: no host.registryAuth is set and there is no Docker config.json \
                         with credentials for {registry}"
                    ),
                ));
            }
        },
    };
    let shown = path.display();
    let text = std::fs::File::open(&path).map_err(|e| {
        let setting = if configured { "host.registryAuth " } else { "" };
        format!("cannot read {setting}{shown}: {e}")
    })?;
    match docker_credential::get_credential_from_reader(BufReader::new(text), registry) {
        Ok(DockerCredential::UsernamePassword(user, password)) => Ok((
            RegistryAuth::Basic(user, password),
            format!("with the credentials for {registry} in {shown}"),
        )),
        Ok(DockerCredential::IdentityToken(_)) => Err(format!(
            "{shown} has an identity token for {registry}, which is not supported: give a username \
             and password (an access token goes in the password)"
        )),
        Err(CredentialRetrievalError::NoCredentialConfigured) => Ok((
            RegistryAuth::Anonymous,
            format!("anonymously: {shown} has no credentials for {registry}"),
        )),
        Err(e) => Err(format!("{shown}, credentials for {registry}: {e}")),
    }
}

/// Where the Docker CLI keeps its `config.json`.
fn docker_cli_config() -> Option<PathBuf> {
    std::env::var_os("DOCKER_CONFIG")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".docker")))
        .map(|dir| dir.join("config.json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(text: &str) -> Reference {
        text.parse().unwrap()
    }

    #[test]
    fn a_configured_file_gives_the_registrys_credentials_or_anonymous_access() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.json");
        // `auth` is base64("ci:s3cret"); the key may carry a scheme, as `docker login` writes it.
        std::fs::write(
            &file,
            r#"{"auths": {"https://registry.example:5000": {"auth": "Y2k6czNjcmV0"}}}"#,
        )
        .unwrap();
        let (auth, how) =
            credentials(Some(&file), &reference("registry.example:5000/p/labels:1")).unwrap();
        assert!(
            matches!(&auth, RegistryAuth::Basic(u, p) if u == "ci" && p == "s3cret"),
            "{auth:?}"
        );
        assert!(how.contains("registry.example:5000"), "{how}");

        let (auth, how) = credentials(Some(&file), &reference("other.example/p:1")).unwrap();
        assert!(matches!(auth, RegistryAuth::Anonymous), "{auth:?}");
        assert!(how.starts_with("anonymously: "), "{how}");
    }

    #[test]
    fn a_missing_or_broken_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nowhere.json");
        let why = credentials(Some(&missing), &reference("r.example/p:1")).unwrap_err();
        assert!(
            why.contains("host.registryAuth") && why.contains("nowhere.json"),
            "{why}"
        );

        let broken = dir.path().join("config.json");
        std::fs::write(&broken, r#"{"auths": {"r.example": {"auth": "%%%"}}}"#).unwrap();
        let why = credentials(Some(&broken), &reference("r.example/p:1")).unwrap_err();
        assert!(
            why.contains("config.json") && why.contains("r.example"),
            "{why}"
        );
    }
}
