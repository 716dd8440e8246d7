//! A cached set-up unpacked by the servo (issue 50): the host's copy of
//! the set-up cache's tar is bound read-only into the container (that one
//! file), and the servo has it unpacked into /workspace by the agent's
//! own unpacker (`servo unpack-setup`) while it starts, instead of Docker
//! unpacking it through its archive API before the start.

/// Set in a servo container's environment when a cached set-up is to be
/// unpacked into its workspace: the tar's path inside the container
/// ([`TAR_PATH`]).
pub const TAR_ENV: &str = "SAHEELI_SETUP_TAR";

/// Where the tar is bound, read-only: outside the workspace and the
/// gateway's directory, a directory of its own.
pub const TAR_PATH: &str = "/run/saheeli-setup/workspace.tar";

/// The most entries a cached set-up may unpack (the foreman's listing of
/// a workspace stops at the same number).
pub const MAX_ENTRIES: u64 = 1_000_000;

/// Set in a servo container's environment when what the task's own image
/// held at `workdir:` (kept at [`SEED_DIR`]) is to be copied into its
/// fresh workspace as the servo starts (issue 49): the seed's path.
pub const SEED_ENV: &str = "SAHEELI_SEED";

/// Where the layer over a task's image keeps what the image held at
/// `workdir:`.
pub const SEED_DIR: &str = "/.saheeli/seed";

/// The most bytes of file content a seed may hold.
pub const MAX_SEED_BYTES: u64 = 1 << 30;
