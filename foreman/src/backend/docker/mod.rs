//! Everything Saheeli asks of Docker, through bollard: build the servo
//! image, create a hardened and labelled container per task, copy files in
//! and out, wait, stop, and clean up.
//!
//! Containers and volumes are found by their `saheeli.task` label, never by
//! name; a task's verify container also carries `saheeli.role=verify`.

mod container;
mod daemon;
mod exec;
mod freeze;
mod image;
mod labels;
mod owner;
mod regrade;
mod servo_copy;
mod setup;
mod setup_bind;
mod setup_cache;
mod setup_delta;
mod setup_phase;
mod setup_stream;
mod task_image;
mod timed;
mod verify;
mod verify_copy;
mod verify_undo;
mod volume;

pub(crate) use crate::fault::DaemonFault;
pub(crate) use bollard::Docker;
pub(crate) use container::{
    CONTAINER_CAPS, ServoContainer, create_container, create_servo, download_workspace, hardened,
    has_started, kill, oom_killed, read_only_bind, remove_container, running, setup_env, start,
    stop, upload, upload_as, upload_file, wait,
};
pub(crate) use daemon::{await_daemon, connect, daemon_fault};
pub(crate) use exec::{exec_quiet, exec_shell, exec_shell_env, exec_shell_then};
pub(crate) use freeze::{pause, unpause};
pub(crate) use image::{
    BuildProgress, ImageMissing, build_image, remove_tag, require_image, unused_task_images,
};
pub(crate) use labels::task_labels;
pub(crate) use labels::{
    POOL_LABEL, POOL_OWNER_LABEL, POOL_SLOT_LABEL, TASK_LABEL, every_task_container, labelled,
    pool_db, pool_labelled, pool_labels, task_containers, task_containers_in_order, task_volumes,
};
pub(crate) use owner::Owner;
pub(crate) use regrade::RegradeBox;
pub(crate) use servo_copy::{SERVO_PATH, ServoCopies, ServoImage};
pub(crate) use setup::run_setup;
pub(crate) use setup_cache::{CACHE_REPO, CacheEntry, SetupCache, cache_key};
pub(crate) use setup_phase::{SetupPhase, set_up, setup_key};
pub(crate) use task_image::{TaskBase, read_seed, task_image};
use timed::{DockerOp, timed};
pub(crate) use verify::{
    ROLE_LABEL, Sandbox, VERIFY_ROLE, VerifyBox, VerifyNetwork, checking_body, freeze, thaw,
};
pub(crate) use verify_copy::{OnCopy, remove as remove_check_copy};
pub(crate) use verify_undo::{recover_verify, remove_verify_containers};
pub(crate) use volume::{
    WorkspaceMount, create_volume_as, local_volume_dir_named, remove_volume, volume_name,
};
