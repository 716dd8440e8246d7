//! Tests of `setup_delta`: tars made here as Docker sends /workspace.

use super::*;

enum E<'a> {
    Dir(&'a str),
    File(&'a str, &'a [u8]),
    Sym(&'a str, &'a str),
    Hard(&'a str, &'a str),
    Fifo(&'a str),
}

fn archive(entries: &[E]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut root = tar::Header::new_gnu();
    root.set_entry_type(EntryType::Directory);
    root.set_mode(0o755);
    root.set_size(0);
    b.append_data(&mut root, "workspace/", io::empty()).unwrap();
    for e in entries {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_uid(1000);
        h.set_gid(1000);
        h.set_size(0);
        match e {
            E::Dir(p) => {
                h.set_entry_type(EntryType::Directory);
                h.set_mode(0o755);
                b.append_data(&mut h, format!("workspace/{p}/"), io::empty())
                    .unwrap();
            }
            E::File(p, data) => {
                h.set_size(data.len() as u64);
                b.append_data(&mut h, format!("workspace/{p}"), *data)
                    .unwrap();
            }
            E::Sym(p, t) => {
                h.set_entry_type(EntryType::Symlink);
                b.append_link(&mut h, format!("workspace/{p}"), t).unwrap();
            }
            E::Hard(p, t) => {
                h.set_entry_type(EntryType::Link);
                b.append_link(&mut h, format!("workspace/{p}"), format!("workspace/{t}"))
                    .unwrap();
            }
            E::Fifo(p) => {
                h.set_entry_type(EntryType::Fifo);
                b.append_data(&mut h, format!("workspace/{p}"), io::empty())
                    .unwrap();
            }
        }
    }
    b.into_inner().unwrap()
}

fn listing(entries: &[E]) -> Listing {
    match list(archive(entries).as_slice(), u64::MAX).unwrap() {
        Capped::Within(l) => l,
        Capped::Over => panic!("over"),
    }
}

/// The kept entries' paths and contents.
fn kept(tar: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut a = tar::Archive::new(tar);
    a.entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let p = e.path().unwrap().display().to_string();
            let mut data = Vec::new();
            e.read_to_end(&mut data).unwrap();
            (p.trim_end_matches('/').to_string(), data)
        })
        .collect()
}

fn run(before: &[E], after: &[E]) -> (Delta, Vec<(String, Vec<u8>)>) {
    let l = listing(before);
    let mut out = Vec::new();
    let d = match delta(archive(after).as_slice(), &l, &mut out, u64::MAX).unwrap() {
        Capped::Within(d) => d,
        Capped::Over => panic!("over"),
    };
    (d, kept(&out))
}

#[test]
fn only_what_the_set_up_made_or_changed_is_kept() {
    let before = [
        E::Dir("src"),
        E::File("src/main.py", b"print(1)\n"),
        E::File("requirements.txt", b"a==1\n"),
        E::File("counter", b"1\n"),
    ];
    let after = [
        E::Dir("src"),
        E::File("src/main.py", b"print(1)\n"),
        E::File("requirements.txt", b"a==1\n"),
        E::File("counter", b"2\n"),
        E::Dir(".venv"),
        E::File(".venv/lib.py", b"x = 1\n"),
        E::Sym(".venv/python", "/usr/bin/python3"),
    ];
    let (d, kept) = run(&before, &after);
    let names: Vec<&str> = kept.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(names, ["counter", ".venv", ".venv/lib.py", ".venv/python"]);
    assert_eq!(kept[0].1, b"2\n");
    assert_eq!(d.entries, 4);
    assert!(d.bytes > 0);
}

#[test]
fn nothing_changed_keeps_nothing() {
    let same = [E::Dir("a"), E::File("a/b", b"x")];
    let (d, kept) = run(&same, &same);
    assert!(kept.is_empty());
    assert_eq!(d.entries, 0);
}

#[test]
fn fifos_and_links_to_what_was_not_kept_are_left_out() {
    let before = [E::File("old", b"o")];
    let after = [
        E::File("old", b"o"),
        E::Fifo("pipe"),
        E::Hard("to-old", "old"),
        E::File("new", b"n"),
        E::Hard("to-new", "new"),
    ];
    let (d, kept) = run(&before, &after);
    let names: Vec<&str> = kept.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(names, ["new", "to-new"]);
    assert_eq!(d.left_out, 2);
}

#[test]
fn a_changed_link_target_is_kept() {
    let (_, kept) = run(&[E::Sym("l", "a")], &[E::Sym("l", "b")]);
    assert_eq!(kept.len(), 1);
}

#[test]
fn both_passes_stop_at_their_cap() {
    let big = vec![7u8; 10_000];
    let entries = [E::File("big", &big)];
    assert!(
        list(archive(&entries).as_slice(), 1000)
            .unwrap()
            .within()
            .is_none()
    );
    let empty = listing(&[]);
    let r = delta(archive(&entries).as_slice(), &empty, Vec::new(), 5000).unwrap();
    assert_eq!(r, Capped::Over);
}

#[test]
fn paths_leaving_the_workspace_are_not_entries() {
    assert_eq!(relative(b"workspace/a/b"), Some(b"a/b".to_vec()));
    assert_eq!(relative(b"workspace/"), None);
    assert_eq!(relative(b"workspace/../etc"), None);
    assert_eq!(relative(b"workspace/a//b"), None);
}

impl<T> Capped<T> {
    fn within(self) -> Option<T> {
        match self {
            Capped::Within(t) => Some(t),
            Capped::Over => None,
        }
    }
}
