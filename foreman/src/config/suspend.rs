//! `suspend:` — what `suspend_after` does to a waiting servo (issue 51).
//! `freeze` (the default) puts its container in the cgroup freezer;
//! `checkpoint` would write it to disk with CRIU and give its memory back.
//! Checkpointing is not supported: the experiment on our hosts
//! (docs/design/checkpoint.md) could not restore a hardened servo through
//! Docker, so the key is refused at load with the reason, never accepted
//! and quietly frozen instead.

use serde::Deserialize;

/// What a servo that waited `suspend_after` becomes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Suspend {
    /// The cgroup freezer (`docker pause`): no CPU, no slot, same memory.
    #[default]
    Freeze,
    /// CRIU to disk, restored on the answer: refused ([`CHECKPOINT_UNSUPPORTED`]).
    Checkpoint,
}

/// Why `suspend: checkpoint` is refused, as the error says it.
pub(crate) const CHECKPOINT_UNSUPPORTED: &str = "`suspend: checkpoint` is not supported: \
a hardened servo cannot be checkpointed and restored through Docker here. CRIU cannot \
dump the servo's open connection to its gateway (\"Can't dump half of stream unix \
connection\", even with --ext-unix-sk), cannot read the rlimits of its non-root processes \
without CAP_SYS_RESOURCE (\"Can't get rlimit 0: Operation not permitted\"), and the \
userns-remap way around that fails at restore (\"Unable to open tty-info.img: Permission \
denied\"); Debian 12's criu 3.17 does not start on kernels >= 6.13 at all. Use `suspend: \
freeze` (the default); see docs/design/checkpoint.md";

impl Suspend {
    /// The reason this mode is refused, if it is.
    pub fn problem(self) -> Option<&'static str> {
        match self {
            Suspend::Freeze => None,
            Suspend::Checkpoint => Some(CHECKPOINT_UNSUPPORTED),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freeze_is_the_default_and_checkpoint_is_refused_with_its_reason() {
        assert_eq!(Suspend::default(), Suspend::Freeze);
        assert_eq!(Suspend::Freeze.problem(), None);
        let why = Suspend::Checkpoint.problem().unwrap();
        assert!(why.contains("not supported"), "{why}");
        assert!(why.contains("docs/design/checkpoint.md"), "{why}");
        let parsed: Suspend = serde_yaml::from_str("checkpoint").unwrap();
        assert_eq!(parsed, Suspend::Checkpoint);
        assert!(serde_yaml::from_str::<Suspend>("hibernate").is_err());
    }
}
