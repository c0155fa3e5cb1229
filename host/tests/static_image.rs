//! The image, run the way a container runtime runs it, against the real kube-apiserver. There
//! is no container engine here, so the test builds what `deploy/Dockerfile`'s final stage holds
//! and runs it as a Deployment from `wasmformer manifests` would:
//!
//! - the static binary (`scripts/build-static`; `$WASMFORMER_STATIC_BIN`) has no interpreter
//!   and needs no shared library;
//! - a root directory holds only what the Dockerfile copies (the binary at its `ENTRYPOINT`, the
//!   CA certificates) plus what the kubelet mounts (the ConfigMap's config, the service account's
//!   token and CA, an `emptyDir` at the cache directory);
//! - the binary runs in it with the Deployment's args and env and the Dockerfile's `ENV`, as the
//!   `USER` (65532), in a user and mount namespace with the root bind-mounted read-only
//!   (`readOnlyRootFilesystem`) and only the cache volume writable, no new privileges;
//! - it finds the API server in-cluster (`KUBERNETES_SERVICE_HOST`) with a token of the
//!   generated ServiceAccount, so the generated RBAC is what it runs with; it pulls its plugin
//!   over HTTPS from a registry whose CA is only in the image's certificate bundle.
//!
//! The test asserts that the host starts, is ready (synced), and that the plugin handles a
//! ConfigMap the test creates, then that SIGTERM stops it cleanly.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use wasmformer::oci::sha256_digest;
use wasmformer::plugin::content_digest;
use wasmformer_tests::apiserver::KubeApiserver;
use wasmformer_tests::guests;
use wasmformer_tests::image::{Image, Jail, assert_static, static_binary};
use wasmformer_tests::registry::{OciRegistry, free_port};

const WAIT: Duration = Duration::from_secs(90);
/// Where the kubelet mounts a pod's service account.
const SERVICE_ACCOUNT_DIR: &str = "var/run/secrets/kubernetes.io/serviceaccount";
/// Where the image keeps the CA certificates (Debian's bundle, where rustls looks by default).
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

fn run(command: &mut Command, what: &str) -> String {
    let output: Output = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{what} failed:\n{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn kubectl(kubeconfig: &Path, cache: &Path) -> Command {
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "/usr/bin/kubectl".into());
    let mut command = Command::new(kubectl);
    command
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .env_remove("KUBECONFIG");
    command
}

fn yaml(path: &Path) -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn write(path: &Path, contents: impl AsRef<[u8]>, mode: u32) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, contents).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `path` (absolute, as in the image) under `root`.
fn inside(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

/// The host running in the image's root, and its stderr lines.
struct Contained {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Contained {
    fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    fn wait_until(&mut self, what: &str, mut done: impl FnMut(&Self) -> bool) {
        let deadline = Instant::now() + WAIT;
        while !done(self) {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("the host exited ({status}) before {what}:\n{}", self.log());
            }
            assert!(Instant::now() < deadline, "{what}:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The names of the objects the recorder logged.
    fn recorded(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|line| {
                let line: Value = serde_json::from_str(line).ok()?;
                let message = line.pointer("/fields/message")?.as_str()?;
                let call: Value = serde_json::from_str(message).ok()?;
                Some(call["name"].as_str()?.to_owned())
            })
            .collect()
    }
}

impl Drop for Contained {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn get(url: &str) -> Option<(u16, String)> {
    let mut response = ureq::get(url)
        .config()
        .http_status_as_error(false)
        .build()
        .call()
        .ok()?;
    let status = response.status().as_u16();
    Some((status, response.body_mut().read_to_string().ok()?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_static_binary_runs_in_an_image_root_read_only_as_non_root_against_the_api_server() {
    let binary = static_binary();
    assert_static(&binary);
    let image = Image::read();
    let server = KubeApiserver::shared();
    let ns = server.namespace("image").await;
    let kubeconfig = server.kubeconfig("admin");
    let work = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let kubectl_cache = work.path().join("kubectl-cache");

    // The plugin, published over HTTPS by a registry with the API server's certificate: only a
    // certificate bundle holding its CA lets the host pull it.
    let registry = OciRegistry::start_tls(&server.pki("serving.crt"), &server.pki("serving.key"));
    let reference = format!("oci://{}/plugins/recorder:v1", registry.host());
    let recorder = std::fs::read(guests::RECORDER).unwrap();
    run(
        Command::new(env!("CARGO_BIN_EXE_wasmformer"))
            .args(["push", guests::RECORDER, &reference])
            .env("SSL_CERT_FILE", server.pki("ca.crt"))
            .env("WASMFORMER_CACHE_DIR", work.path().join("push-cache")),
        "wasmformer push over HTTPS",
    );

    // The manifests for a config that runs it, applied for real: the host will run as their
    // ServiceAccount, with their RBAC.
    let admin_port = free_port();
    let config = work.path().join("wasmformer.yaml");
    std::fs::write(
        &config,
        format!(
            "host:\n  adminAddress: 0.0.0.0:{admin_port}\nplugins:\n  - name: recorder\n    wasm: {reference}\n    handles: [{{apiVersion: v1, kind: ConfigMap, namespace: {ns}}}]\n    config: {{tag: image}}\n"
        ),
    )
    .unwrap();
    let manifests = work.path().join("manifests");
    run(
        Command::new(env!("CARGO_BIN_EXE_wasmformer"))
            .arg("manifests")
            .arg("--config")
            .arg(&config)
            .args(["--namespace", &ns, "--image", "wasmformer:test", "--out"])
            .arg(&manifests)
            .env("KUBECONFIG", &kubeconfig)
            .env("WASMFORMER_CACHE_DIR", work.path().join("push-cache")),
        "wasmformer manifests",
    );
    run(
        kubectl(&kubeconfig, &kubectl_cache)
            .arg("apply")
            .arg("-k")
            .arg(&manifests),
        "kubectl apply -k",
    );
    let token = run(
        kubectl(&kubeconfig, &kubectl_cache).args(["create", "token", "wasmformer", "-n", &ns]),
        "kubectl create token",
    );

    // What the Deployment runs, and what the image says.
    let deployment = yaml(&manifests.join("deployment.yaml"));
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let mount = |volume: &str| {
        container["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == volume)
            .and_then(|m| m["mountPath"].as_str())
            .unwrap_or_else(|| panic!("no {volume} mount in {container}"))
            .to_owned()
    };
    let (config_dir, cache_dir) = (mount("config"), mount("cache"));
    let uid = pod["securityContext"]["runAsUser"].as_u64().unwrap() as u32;
    let gid = pod["securityContext"]["runAsGroup"].as_u64().unwrap() as u32;
    assert_eq!(
        image.user,
        format!("{uid}:{gid}"),
        "the Dockerfile's USER and the Deployment's runAsUser:runAsGroup differ"
    );
    let mut env: Vec<(String, String)> = image.env.clone();
    for var in container["env"].as_array().unwrap() {
        env.push((
            var["name"].as_str().unwrap().to_owned(),
            var["value"].as_str().unwrap().to_owned(),
        ));
    }
    let cache_env: Vec<&str> = env
        .iter()
        .filter(|(k, _)| k == "WASMFORMER_CACHE_DIR")
        .map(|(_, v)| v.as_str())
        .collect();
    assert!(
        !cache_env.is_empty() && cache_env.iter().all(|dir| *dir == cache_dir),
        "WASMFORMER_CACHE_DIR ({cache_env:?}) is not the emptyDir's mount {cache_dir}"
    );
    assert!(
        image.files.contains(&image.entrypoint[0]) && image.files.iter().any(|f| f == CA_BUNDLE),
        "the image does not copy the binary to its entrypoint and the CA bundle to {CA_BUNDLE}: {image:?}"
    );

    // The root: what the image holds, and what the kubelet mounts into it.
    let root = work.path().join("root");
    let entrypoint = inside(&root, &image.entrypoint[0]);
    std::fs::create_dir_all(entrypoint.parent().unwrap()).unwrap();
    if std::fs::hard_link(&binary, &entrypoint).is_err() {
        std::fs::copy(&binary, &entrypoint).unwrap();
    }
    let mut bundle = std::fs::read(CA_BUNDLE).unwrap_or_default();
    bundle.extend(std::fs::read(server.pki("ca.crt")).unwrap());
    write(&inside(&root, CA_BUNDLE), bundle, 0o644);
    let config_map = yaml(&manifests.join("configmap.yaml"));
    write(
        &inside(&root, &config_dir).join("config.yaml"),
        config_map["data"]["config.yaml"].as_str().unwrap(),
        0o644,
    );
    let account = root.join(SERVICE_ACCOUNT_DIR);
    write(&account.join("token"), token.trim(), 0o644);
    write(
        &account.join("ca.crt"),
        std::fs::read(server.pki("ca.crt")).unwrap(),
        0o644,
    );
    write(&account.join("namespace"), &ns, 0o644);
    let mountpoint = inside(&root, &cache_dir);
    std::fs::create_dir_all(&mountpoint).unwrap();
    for dir in walk_dirs(&root) {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // An emptyDir is created world-writable.
    let volume = work.path().join("cache-volume");
    std::fs::create_dir(&volume).unwrap();
    std::fs::set_permissions(&volume, std::fs::Permissions::from_mode(0o777)).unwrap();

    let jail = Jail::new(&root, &volume, &mountpoint, uid, gid);
    let outer_uid = jail.outer_uid();
    let mut command = Command::new(&image.entrypoint[0]);
    command
        .args(&image.entrypoint[1..])
        .args(
            container["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap()),
        )
        .env_clear()
        .envs(env)
        .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        .env("KUBERNETES_SERVICE_PORT", server.port().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: `enter` makes only system calls on data prepared before the fork.
    unsafe { command.pre_exec(move || jail.enter()) };
    let mut child = command.spawn().unwrap_or_else(|e| {
        panic!(
            "entering the image's root failed ({e}): it takes a user and a mount namespace, a \
             read-only bind mount, chroot and setuid; run as root or allow unprivileged user \
             namespaces (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu also \
             kernel.apparmor_restrict_unprivileged_userns=0)"
        )
    });
    let lines = Arc::new(Mutex::new(Vec::new()));
    let stderr = child.stderr.take().unwrap();
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    let mut host = Contained { child, lines };
    let status_of = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let status = status_of(host.child.id());
    let uids = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert_eq!(
        uids.split_whitespace().skip(1).collect::<Vec<_>>(),
        vec![outer_uid.to_string(); 4],
        "{status}"
    );
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");

    let admin = format!("http://127.0.0.1:{admin_port}");
    host.wait_until("the host became ready", |_| {
        get(&format!("{admin}/readyz")).is_some_and(|(code, _)| code == 200)
    });
    let cms: Api<ConfigMap> = Api::namespaced(server.admin().await, &ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "from-the-test"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    host.wait_until("the plugin handled the ConfigMap", |host| {
        host.recorded().iter().any(|name| name == "from-the-test")
    });

    let (_, status) = get(&format!("{admin}/status")).unwrap();
    let status: Value = serde_json::from_str(&status).unwrap();
    let plugin = &status["plugins"][0];
    assert_eq!(plugin["name"], "recorder", "{status}");
    assert_eq!(
        plugin["version"].as_str().unwrap(),
        content_digest(&recorder),
        "{status}"
    );
    assert_eq!(plugin["synced"], true, "{status}");
    assert_eq!(plugin["failures"], 0, "{status}");

    // The caches went to the volume: the pulled component (`oci/`) and its compiled code.
    let components = volume.join("components");
    assert!(
        components.is_dir(),
        "no components/ in the cache volume:\n{}",
        host.log()
    );
    let cached: Vec<PathBuf> = walk_dirs(&components)
        .into_iter()
        .flat_map(|dir| std::fs::read_dir(dir).unwrap())
        .map(|entry| entry.unwrap().path())
        .collect();
    let has = |suffix: &str| cached.iter().any(|p| p.to_string_lossy().ends_with(suffix));
    let blob = format!(
        "oci/blobs/sha256/{}",
        &sha256_digest(&recorder)["sha256:".len()..]
    );
    assert!(
        has(&blob) && has(".cwasm"),
        "the cache volume holds {cached:?}:\n{}",
        host.log()
    );

    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(host.child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + WAIT;
    let exit = loop {
        if let Some(exit) = host.child.try_wait().unwrap() {
            break exit;
        }
        assert!(
            Instant::now() < deadline,
            "no exit on SIGTERM:\n{}",
            host.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "exit {exit} on SIGTERM:\n{}", host.log());
}

/// `root` and every directory under it.
fn walk_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![root.to_owned()];
    let mut next = 0;
    while next < dirs.len() {
        for entry in std::fs::read_dir(&dirs[next]).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                dirs.push(entry.path());
            }
        }
        next += 1;
    }
    dirs
}
