//! The small launch archive: task and prompt, when they do not fit in the
//! container's environment.

use saheeli_protocol::ServoTask;

use super::*;

/// `prompt.md` and `.saheeli/task.json` as a tar for /workspace.
pub(crate) fn launch_tar(body: &str, task: &ServoTask) -> anyhow::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    let task_json = serde_json::to_vec_pretty(task)?;
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(0o755);
    dir.set_uid(SERVO_UID);
    dir.set_gid(SERVO_UID);
    dir.set_size(0);
    b.append_data(&mut dir, ".saheeli", std::io::empty())?;
    for (name, data, mode) in [
        ("prompt.md", body.as_bytes(), 0o644),
        (".saheeli/task.json", &task_json[..], 0o444),
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_mode(mode);
        h.set_uid(SERVO_UID);
        h.set_gid(SERVO_UID);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, name, data)?;
    }
    Ok(b.into_inner()?)
}
