//! The image without a container engine: the static binary (`scripts/build-static`), what
//! `deploy/Dockerfile`'s final stage says the image holds, and [`Jail`], which makes a child
//! process enter a root directory the way a container runtime starts a container (read-only
//! root, one writable volume, the image's user, no new privileges).

use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use object::read::elf::{Dyn, ProgramHeader};

/// The static binary: `$WASMFORMER_STATIC_BIN` (`scripts/test` builds it), else built now by
/// `scripts/build-static --profile dev`.
pub fn static_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("WASMFORMER_STATIC_BIN") {
        return PathBuf::from(bin);
    }
    let root = crate::repo_root();
    let output = Command::new("bash")
        .arg(root.join("scripts/build-static"))
        .args(["--profile", "dev"])
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/build-static");
    assert!(
        output.status.success(),
        "scripts/build-static failed (see above)"
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    PathBuf::from(stdout.lines().last().expect("the binary's path").trim())
}

/// The final stage of `deploy/Dockerfile`: what the image holds and how it starts.
#[derive(Debug, Default)]
pub struct Image {
    /// `COPY` destinations.
    pub files: Vec<String>,
    /// `ENV` pairs, in order.
    pub env: Vec<(String, String)>,
    /// `USER`, as written (`65532:65532`).
    pub user: String,
    /// `ENTRYPOINT`.
    pub entrypoint: Vec<String>,
}

impl Image {
    /// Reads `deploy/Dockerfile`.
    pub fn read() -> Self {
        let path = crate::repo_root().join("deploy/Dockerfile");
        let text = std::fs::read_to_string(&path).unwrap();
        let last_stage = text.rsplit_once("\nFROM ").expect("a FROM").1;
        let mut image = Image::default();
        for line in last_stage.lines().skip(1) {
            let Some((instruction, rest)) = line.split_once(' ') else {
                continue;
            };
            match instruction {
                "COPY" => image
                    .files
                    .push(rest.rsplit(' ').next().unwrap().to_owned()),
                "ENV" => image.env.extend(rest.split(' ').map(|pair| {
                    let (key, value) = pair.split_once('=').expect("ENV KEY=VALUE");
                    (key.to_owned(), value.to_owned())
                })),
                "USER" => image.user = rest.to_owned(),
                "ENTRYPOINT" => image.entrypoint = serde_json::from_str(rest).unwrap(),
                "CMD" | "#" => {}
                other => panic!("{}: unexpected {other} in the final stage", path.display()),
            }
        }
        image
    }
}

/// The binary has no interpreter (`PT_INTERP`) and needs no shared library (`DT_NEEDED`): it
/// runs where there is no libc to load. (Rust's musl target links it static-pie: it has a
/// dynamic section, for relocating itself, and nothing in it names a library.)
pub fn assert_static(binary: &Path) {
    let data = std::fs::read(binary).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let object::File::Elf64(elf) = &file else {
        panic!("{} is not a 64-bit ELF file", binary.display());
    };
    let endian = elf.endian();
    for segment in elf.elf_program_headers() {
        assert_ne!(
            segment.p_type(endian),
            object::elf::PT_INTERP,
            "{} has an interpreter: it is not static",
            binary.display()
        );
        if let Some(entries) = segment.dynamic(endian, &*data).unwrap() {
            let needed = entries
                .iter()
                .filter(|d| d.d_tag(endian) == object::elf::DT_NEEDED)
                .count();
            assert_eq!(needed, 0, "{} needs shared libraries", binary.display());
        }
    }
}

/// How the child enters the image's root: everything `pre_exec` needs, prepared before the fork
/// (nothing is allocated after it).
pub struct Jail {
    root: CString,
    volume: CString,
    mountpoint: CString,
    /// Flags the root's mount has and a remount must keep (`nosuid`, `nodev`, …).
    locked_flags: libc::c_ulong,
    uid: libc::uid_t,
    gid: libc::gid_t,
    /// Not root: the user and mount namespaces come from an unprivileged user namespace, which
    /// maps the image's user to the caller (`/proc/self/uid_map` and `gid_map` contents).
    user_namespace: Option<(Vec<u8>, Vec<u8>)>,
}

fn cstring(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

impl Jail {
    /// Runs as `uid:gid` in `root`, read-only but for `volume` mounted at `mountpoint` (in it).
    pub fn new(root: &Path, volume: &Path, mountpoint: &Path, uid: u32, gid: u32) -> Self {
        // SAFETY: statvfs on a NUL-terminated path into a zeroed struct it fills.
        let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
        let root_c = cstring(root);
        assert_eq!(unsafe { libc::statvfs(root_c.as_ptr(), &mut stat) }, 0);
        let locked_flags = [
            (libc::ST_NOSUID, libc::MS_NOSUID),
            (libc::ST_NODEV, libc::MS_NODEV),
            (libc::ST_NOEXEC, libc::MS_NOEXEC),
            (libc::ST_NOATIME, libc::MS_NOATIME),
            (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
            (libc::ST_RELATIME, libc::MS_RELATIME),
        ]
        .into_iter()
        .filter(|(st, _)| stat.f_flag & st != 0)
        .fold(0, |flags, (_, ms)| flags | ms);
        // SAFETY: plain getters.
        let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Self {
            root: root_c,
            volume: cstring(volume),
            mountpoint: cstring(mountpoint),
            locked_flags,
            uid,
            gid,
            user_namespace: (euid != 0).then(|| {
                (
                    format!("{uid} {euid} 1").into_bytes(),
                    format!("{gid} {egid} 1").into_bytes(),
                )
            }),
        }
    }

    /// The uid the process has outside: the image's as root, as a container runtime runs it;
    /// the caller's in an unprivileged user namespace.
    pub fn outer_uid(&self) -> u32 {
        match self.user_namespace {
            // SAFETY: a plain getter.
            Some(_) => unsafe { libc::geteuid() },
            None => self.uid,
        }
    }

    /// In the forked child: the steps a container runtime takes, in its order.
    pub fn enter(&self) -> std::io::Result<()> {
        fn check(result: libc::c_int) -> std::io::Result<()> {
            if result == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        }
        fn write_file(path: &CStr, data: &[u8]) -> std::io::Result<()> {
            // SAFETY: open/write/close on a NUL-terminated path and a live buffer.
            unsafe {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let written = libc::write(fd, data.as_ptr().cast(), data.len());
                let error = std::io::Error::last_os_error();
                libc::close(fd);
                if written != data.len() as isize {
                    return Err(error);
                }
            }
            Ok(())
        }
        let none = std::ptr::null::<libc::c_char>();
        // SAFETY: system calls on NUL-terminated strings that outlive them, in a child that is
        // single-threaded between fork and exec.
        unsafe {
            match &self.user_namespace {
                None => {
                    check(libc::setgroups(0, std::ptr::null()))?;
                    check(libc::unshare(libc::CLONE_NEWNS))?;
                }
                Some((uid_map, gid_map)) => {
                    check(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS))?;
                    write_file(c"/proc/self/setgroups", b"deny")?;
                    write_file(c"/proc/self/uid_map", uid_map)?;
                    write_file(c"/proc/self/gid_map", gid_map)?;
                }
            }
            // Nothing mounted here propagates back to the machine.
            check(libc::mount(
                none,
                c"/".as_ptr(),
                none,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            // readOnlyRootFilesystem: the root bound onto itself, read-only …
            check(libc::mount(
                self.root.as_ptr(),
                self.root.as_ptr(),
                none,
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            ))?;
            check(libc::mount(
                none,
                self.root.as_ptr(),
                none,
                libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | self.locked_flags,
                std::ptr::null(),
            ))?;
            // … and the emptyDir on top, writable.
            check(libc::mount(
                self.volume.as_ptr(),
                self.mountpoint.as_ptr(),
                none,
                libc::MS_BIND,
                std::ptr::null(),
            ))?;
            check(libc::chroot(self.root.as_ptr()))?;
            check(libc::chdir(c"/".as_ptr()))?;
            check(libc::setresgid(self.gid, self.gid, self.gid))?;
            check(libc::setresuid(self.uid, self.uid, self.uid))?;
            // allowPrivilegeEscalation: false.
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
        }
        Ok(())
    }
}
