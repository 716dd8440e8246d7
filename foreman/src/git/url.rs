//! Where a `workspace: { git: … }` repository is (issue 52): a local path
//! or `file://` (fetched by the foreman from the disk), or a remote one
//! (`https://`, `ssh://`, `git@host:path`), fetched by the foreman only
//! from a host the task's `egress: setup` list names. Pure.

use std::path::{Path, PathBuf};

use crate::task::egress::{Host, Rule};

/// A repository's place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Location {
    /// A directory on this host (absolute; not checked here).
    Local(PathBuf),
    /// A network URL, with the host and port the foreman would connect to.
    Remote { host: String, port: u16 },
}

/// Where `git` (as a prompt file in `dir` names it) is; Err says why it
/// is no repository address.
pub(crate) fn locate(git: &str, dir: &Path) -> Result<Location, String> {
    let g = git.trim();
    if g.is_empty() {
        return Err("is empty: name a repository (a path, `file://…` or a URL)".into());
    }
    if g.contains('\n') || g.starts_with('-') {
        return Err(format!("`{g}` is not a repository address"));
    }
    if let Some(path) = g.strip_prefix("file://") {
        if !path.starts_with('/') {
            return Err(format!("`{g}`: a `file://` URL needs an absolute path"));
        }
        return Ok(Location::Local(PathBuf::from(path)));
    }
    if let Some((scheme, rest)) = g.split_once("://") {
        let port = match scheme {
            "https" => 443,
            "http" => 80,
            "ssh" | "git+ssh" => 22,
            "git" => 9418,
            _ => {
                return Err(format!(
                    "`{g}`: the scheme `{scheme}://` is not one git fetches over (https, http, ssh, git, file)"
                ));
            }
        };
        let authority = rest.split('/').next().unwrap_or("");
        let hostport = authority.rsplit('@').next().unwrap_or("");
        return remote(g, hostport, port);
    }
    if g.contains("::") {
        // `ext::sh -c …` and other transport helpers: never.
        return Err(format!(
            "`{g}`: transport helpers (`TRANSPORT::ADDRESS`) are not allowed"
        ));
    }
    // `user@host:path` (scp-like): a colon before any slash.
    if let Some((before, _)) = g.split_once(':')
        && !before.contains('/')
        && !g.starts_with('.')
    {
        let host = before.rsplit('@').next().unwrap_or("");
        return remote(g, host, 22);
    }
    let p = Path::new(g);
    Ok(Location::Local(if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    }))
}

fn remote(url: &str, hostport: &str, default_port: u16) -> Result<Location, String> {
    let (host, port) = match hostport.strip_prefix('[') {
        Some(v6) => {
            let (h, rest) = v6.split_once(']').ok_or(format!("`{url}`: a bad host"))?;
            (h, rest.strip_prefix(':'))
        }
        None => match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        },
    };
    let port = match port {
        None | Some("") => default_port,
        Some(p) => p
            .parse()
            .map_err(|_| format!("`{url}`: `{p}` is not a port"))?,
    };
    if Host::parse(host).is_none() {
        return Err(format!("`{url}`: `{host}` is not a host name"));
    }
    Ok(Location::Remote {
        host: host.to_ascii_lowercase(),
        port,
    })
}

/// Whether the foreman may fetch a remote repository at `host`:`port`:
/// only when the task's `egress: setup` list lets it through; Err says
/// what to do.
pub(crate) fn allowed(url: &str, host: &str, port: u16, setup: &[Rule]) -> Result<(), String> {
    let h = Host::parse(host).ok_or_else(|| format!("`{url}`: `{host}` is not a host name"))?;
    if setup.iter().any(|r| r.matches(&h, port)) {
        return Ok(());
    }
    Err(format!(
        "`{url}` is a remote repository, and `egress: setup` does not list `{host}` (port {port}): \
         the foreman fetches and pushes a remote repository itself, only from a host that list names; \
         add `{host}` to `egress: setup`, or name a local clone (a path or `file://…`)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(list: &[&str]) -> Vec<Rule> {
        list.iter()
            .map(|r| Rule::parse(r, false).unwrap())
            .collect()
    }

    #[test]
    fn each_address_is_placed() {
        let dir = Path::new("/prompts");
        let cases: &[(&str, Result<Location, &str>)] = &[
            ("../repo", Ok(Location::Local("/prompts/../repo".into()))),
            ("/srv/repo.git", Ok(Location::Local("/srv/repo.git".into()))),
            ("file:///srv/r", Ok(Location::Local("/srv/r".into()))),
            ("file://rel", Err("absolute path")),
            (
                "https://github.com/o/r.git",
                Ok(Location::Remote {
                    host: "github.com".into(),
                    port: 443,
                }),
            ),
            (
                "ssh://git@example.com:2222/o/r",
                Ok(Location::Remote {
                    host: "example.com".into(),
                    port: 2222,
                }),
            ),
            (
                "git@github.com:o/r.git",
                Ok(Location::Remote {
                    host: "github.com".into(),
                    port: 22,
                }),
            ),
            ("ext::sh -c touch% /tmp/x", Err("transport helpers")),
            ("ftp://h/r", Err("scheme `ftp://`")),
            ("-uhack", Err("not a repository")),
            ("", Err("is empty")),
        ];
        for (text, want) in cases {
            match (locate(text, dir), want) {
                (Ok(got), Ok(want)) => assert_eq!(&got, want, "{text}"),
                (Err(got), Err(want)) => assert!(got.contains(want), "{text}: {got}"),
                (got, want) => panic!("{text}: {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn a_remote_needs_its_host_in_egress_setup() {
        let url = "https://github.com/o/r.git";
        let e = allowed(url, "github.com", 443, &[]).unwrap_err();
        assert!(
            e.contains("`egress: setup` does not list `github.com`"),
            "{e}"
        );
        assert!(allowed(url, "github.com", 443, &rules(&["github.com"])).is_ok());
        assert!(allowed(url, "github.com", 22, &rules(&["github.com"])).is_err());
        assert!(allowed(url, "github.com", 22, &rules(&["github.com:22"])).is_ok());
    }
}
