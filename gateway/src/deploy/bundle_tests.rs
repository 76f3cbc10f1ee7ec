use super::*;

const LIMIT: usize = 1 << 20;

/// A gzip'd tar with one entry of `kind` at `path` (raw bytes, so bad paths can be written).
fn archive_with(path: &[u8], kind: tar::EntryType, data: &[u8], link: Option<&str>) -> Vec<u8> {
    let mut header = tar::Header::new_gnu();
    {
        let name = &mut header.as_old_mut().name;
        name[..path.len()].copy_from_slice(path);
    }
    header.set_size(data.len() as u64);
    header.set_mode(0o644);
    header.set_entry_type(kind);
    if let Some(target) = link {
        header.set_link_name(target).unwrap();
    }
    header.set_cksum();
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    b.append(&header, data).unwrap();
    b.into_inner().unwrap().finish().unwrap()
}

fn folder(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

#[test]
fn a_packed_folder_unpacks_to_the_same_files_and_version() {
    let dir = folder(&[
        ("fn.py", "def fn(i, h): return i"),
        ("lib/util.py", "X = 1"),
    ]);
    let bundle = Bundle::from_dir(dir.path()).unwrap();
    let again = Bundle::unpack(&bundle.pack().unwrap(), LIMIT).unwrap();
    assert_eq!(again, bundle);
    assert_eq!(
        again.version(&VersionEnv::default()),
        bundle.version(&VersionEnv::default())
    );
    let names: Vec<&str> = again.files().keys().map(String::as_str).collect();
    assert_eq!(names, ["fn.py", "lib/util.py"]);
}

#[test]
fn the_version_follows_content_env_secrets_and_cron_but_not_times_or_order() {
    let with = |env: &[(String, String)], secrets: &[(String, String)]| VersionEnv {
        env: env.to_vec(),
        secrets: secrets.to_vec(),
        cron: Vec::new(),
        on: Vec::new(),
    };
    let a = Bundle::from_dir(folder(&[("fn.py", "a"), ("b.txt", "b")]).path()).unwrap();
    let b = Bundle::from_dir(folder(&[("b.txt", "b"), ("fn.py", "a")]).path()).unwrap();
    let v = a.version(&with(&[], &[]));
    assert_eq!(v.len(), 12);
    assert_eq!(v, b.version(&with(&[], &[])));
    let changed = Bundle::from_dir(folder(&[("fn.py", "A"), ("b.txt", "b")]).path()).unwrap();
    assert_ne!(v, changed.version(&with(&[], &[])));
    let env = [("K".to_owned(), "1".to_owned())];
    assert_ne!(v, a.version(&with(&env, &[])));
    let s1 = [("K".to_owned(), "one".to_owned())];
    let s2 = [("K".to_owned(), "two".to_owned())];
    assert_ne!(a.version(&with(&[], &s1)), a.version(&with(&[], &s2)));
    // A secret's value never appears in what is hashed in the clear.
    assert_ne!(a.version(&with(&[], &s1)), a.version(&with(&s1, &[])));
    let on = VersionEnv {
        on: vec!["nats:orders".into()],
        ..with(&[], &[])
    };
    assert_ne!(v, a.version(&on));
    let cron = VersionEnv {
        cron: vec!["*/5 * * * *".into()],
        ..VersionEnv::default()
    };
    assert_ne!(v, a.version(&cron));
}

#[test]
fn unsafe_entries_are_refused_by_name() {
    let cases: Vec<(Vec<u8>, BundleError)> = vec![
        (
            archive_with(b"../evil.py", tar::EntryType::Regular, b"x", None),
            BundleError::ParentPath("../evil.py".into()),
        ),
        (
            archive_with(b"a/../../evil", tar::EntryType::Regular, b"x", None),
            BundleError::ParentPath("a/../../evil".into()),
        ),
        (
            archive_with(b"/etc/evil", tar::EntryType::Regular, b"x", None),
            BundleError::AbsolutePath("/etc/evil".into()),
        ),
        (
            archive_with(b"fn.py", tar::EntryType::Symlink, b"", Some("/etc/passwd")),
            BundleError::Link("fn.py".into()),
        ),
        (
            archive_with(b"fn.py", tar::EntryType::Link, b"", Some("other")),
            BundleError::Link("fn.py".into()),
        ),
        (
            archive_with(b"dev", tar::EntryType::Char, b"", None),
            BundleError::Special {
                path: "dev".into(),
                kind: "character device",
            },
        ),
        (
            archive_with(b"fifo", tar::EntryType::Fifo, b"", None),
            BundleError::Special {
                path: "fifo".into(),
                kind: "FIFO",
            },
        ),
    ];
    for (archive, want) in cases {
        assert_eq!(Bundle::unpack(&archive, LIMIT), Err(want));
    }
}

#[test]
fn corrupt_empty_and_oversized_archives_are_refused() {
    assert!(matches!(
        Bundle::unpack(b"not gzip at all", LIMIT),
        Err(BundleError::Corrupt(_))
    ));
    let good = archive_with(
        b"fn.py",
        tar::EntryType::Regular,
        b"def fn(i, h): return i",
        None,
    );
    assert!(matches!(
        Bundle::unpack(&good[..good.len() / 2], LIMIT),
        Err(BundleError::Corrupt(_))
    ));
    let empty = {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        tar::Builder::new(gz)
            .into_inner()
            .unwrap()
            .finish()
            .unwrap()
    };
    assert_eq!(Bundle::unpack(&empty, LIMIT), Err(BundleError::Empty));
    // Small when sent, large unpacked: the limit counts the unpacked bytes too.
    let zeros = vec![0u8; 4096];
    let bomb = archive_with(b"zeros", tar::EntryType::Regular, &zeros, None);
    assert!(bomb.len() < 1024);
    assert_eq!(
        Bundle::unpack(&bomb, 1024),
        Err(BundleError::TooLarge { limit: 1024 })
    );
    assert_eq!(
        Bundle::unpack(&good, 10),
        Err(BundleError::TooLarge { limit: 10 })
    );
}

#[test]
fn writing_keeps_the_executable_bit_and_nothing_else() {
    use std::os::unix::fs::PermissionsExt;
    let src = folder(&[("fn.sh", "cat"), ("data/x", "1")]);
    std::fs::set_permissions(
        src.path().join("fn.sh"),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    let bundle = Bundle::from_dir(src.path()).unwrap();
    let out = tempfile::tempdir().unwrap();
    let target = out.path().join("v");
    bundle.write_to(&target).unwrap();
    let mode = |p: &str| {
        std::fs::metadata(target.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("fn.sh"), 0o755);
    assert_eq!(mode("data/x"), 0o644);
    assert_eq!(std::fs::read_to_string(target.join("data/x")).unwrap(), "1");
}

#[test]
fn a_folder_with_a_link_is_not_packed() {
    let src = folder(&[("fn.py", "x")]);
    std::os::unix::fs::symlink("/etc/passwd", src.path().join("passwd")).unwrap();
    let err = Bundle::from_dir(src.path()).unwrap_err();
    assert!(err.to_string().contains("passwd"), "{err}");
}
