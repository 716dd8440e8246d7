//! What an importer reads from a task's Dockerfile without building it:
//! the final stage's working directory and user.

/// The instructions of a Dockerfile's text: (keyword uppercased, its
/// arguments), continuation lines joined, comments and blank lines skipped.
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        if let Some(head) = trimmed.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
            continue;
        }
        current.push_str(trimmed);
        let (word, rest) = current
            .split_once(char::is_whitespace)
            .unwrap_or((current.as_str(), ""));
        out.push((word.to_ascii_uppercase(), rest.trim().to_string()));
        current.clear();
    }
    out
}

/// What the final stage of a Dockerfile sets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stage {
    /// The last `WORKDIR` (relative ones joined to the one before); `None`
    /// when there is none or it names a build variable.
    pub workdir: Option<String>,
    /// The last `USER` of the final stage (its name or uid, without a group).
    pub user: Option<String>,
}

/// Reads the final stage's `WORKDIR` and `USER` from a Dockerfile's text.
pub(crate) fn final_stage(text: &str) -> Stage {
    let mut stage = Stage::default();
    let mut dynamic = false;
    for (word, args) in instructions(text) {
        match word.as_str() {
            // A stage built FROM another keeps its WORKDIR; its USER is
            // reset only in the sense that the base's user applies, which
            // for the images these tasks use is root.
            "FROM" => stage.user = None,
            "WORKDIR" => {
                let dir = args.trim_matches('"').to_string();
                dynamic = dir.contains('$');
                stage.workdir = Some(match (&stage.workdir, dir.starts_with('/')) {
                    (Some(prev), false) => format!("{}/{dir}", prev.trim_end_matches('/')),
                    _ => dir,
                });
            }
            "USER" => {
                let user = args.split(':').next().unwrap_or("").trim().to_string();
                stage.user = (!user.is_empty()).then_some(user);
            }
            _ => {}
        }
    }
    if dynamic {
        stage.workdir = None;
    }
    stage
}

/// Whether a user name or id (`[agent].user`, a Dockerfile's `USER`) is root.
pub(crate) fn is_root(user: &str) -> bool {
    matches!(user.trim(), "root" | "0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_last_workdir_and_the_final_stages_user() {
        let text = "# build\nFROM golang:1.23 AS build\nUSER builder\nWORKDIR /src\n\
                    RUN go build \\\n  -o /out/app .\n\nFROM debian:bookworm\nWORKDIR /app\n\
                    workdir data\nCOPY --from=build /out/app /usr/bin/app\n";
        let stage = final_stage(text);
        assert_eq!(stage.workdir.as_deref(), Some("/app/data"));
        assert_eq!(
            stage.user, None,
            "USER of an earlier stage does not carry over"
        );
        let stage = final_stage("FROM python:3.13-slim\nUSER 1000:1000\n");
        assert_eq!(stage.user.as_deref(), Some("1000"));
        assert_eq!(stage.workdir, None);
        assert_eq!(
            final_stage("FROM x\nARG D=/srv\nWORKDIR $D\n").workdir,
            None,
            "a WORKDIR naming a build variable is not guessed"
        );
        assert!(is_root("root") && is_root("0") && !is_root("agent"));
    }
}
