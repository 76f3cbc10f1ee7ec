//! A deploy onto a full disk: a Quito cloud (a real `geofaas node`) keeps its state folder on a
//! 4 MiB tmpfs. Version 1 deploys; the disk is then filled to the last byte and version 2
//! (with a 256 KiB data file) is refused with `507 disk_full` naming the disk, nothing of it left
//! in the state folder, and version 1 still answering (curl); once space is freed the same
//! deploy succeeds and version 2 answers. Mounting needs root (the CI machine runs as root).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::processes::{greeter, text, Fleet, Layout, NodeSpec};

const NODES: [NodeSpec; 1] = [("quito", "cloud", -0.18, -78.47)];

/// A tmpfs of `size` mounted at `dir`, unmounted when dropped.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mounting a tmpfs needs root: {}",
            text(&out)
        );
        Self(dir.to_owned())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the disk under `dir` until it refuses another byte.
fn fill(dir: &Path) -> std::path::PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![1u8; 4096];
    while f.write_all(&chunk).is_ok() {}
    let mut one = [1u8; 1];
    while f.write_all(&one).is_ok() {
        one[0] = 1;
    }
    let _ = f.sync_all();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_onto_a_full_disk_is_refused_clearly_and_the_live_version_keeps_serving() {
    let scratch = tempfile::tempdir().unwrap();
    let state = scratch.path().join("state");
    let _disk = Tmpfs::mount(&state, "4m");
    let fleet = Fleet::with(Layout {
        state_dir: Some(state.clone()),
        ..Layout::new("quito", &NODES)
    });
    fleet.wait_ready("quito").await;
    let src = scratch.path().join("src");

    let v1 = fleet.geofaas(&["deploy", &greeter(&src, "v1", 0)]);
    assert!(v1.status.success(), "{}", text(&v1));
    let call = |fleet: &Fleet| fleet.curl(&["--data", "x", &fleet.url("quito", "/fn/greeter")]);
    assert_eq!(call(&fleet), (200, "greeter v1".to_owned()));

    let filler = fill(&state);
    let v2_dir = greeter(&src, "v2", 256 * 1024);
    let refused = fleet.geofaas(&["deploy", &v2_dir]);
    let said = text(&refused);
    assert!(!refused.status.success(), "{said}");
    assert!(said.contains("507") || said.contains("disk_full"), "{said}");
    assert!(said.contains("disk is full"), "{said}");
    // Nothing half written: no temporary folder left beside the versions.
    let leftovers: Vec<String> = walk(&state)
        .into_iter()
        .filter(|p| p.contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert_eq!(
        call(&fleet),
        (200, "greeter v1".to_owned()),
        "the live version keeps serving"
    );

    std::fs::remove_file(filler).unwrap();
    let again = fleet.geofaas(&["deploy", &v2_dir]);
    assert!(again.status.success(), "{}", text(&again));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(call(&fleet), (200, "greeter v2".to_owned()));
    eprintln!(
        "full disk: deploy refused with: {}",
        said.lines().find(|l| l.contains("disk")).unwrap_or("")
    );
}

fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            out.push(p.display().to_string());
            if p.is_dir() {
                out.extend(walk(&p));
            }
        }
    }
    out
}
