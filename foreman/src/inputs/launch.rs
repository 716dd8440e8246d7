//! The small launch archive: task and prompt, when they do not fit in the
//! container's environment.

use saheeli_protocol::ServoTask;

use super::AGENT_UID;

/// `prompt.md` and `.saheeli/task.json` as a tar for /workspace.
pub(crate) fn launch_tar(body: &str, task: &ServoTask) -> anyhow::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    let task_json = serde_json::to_vec_pretty(task)?;
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(0o755);
    // `.saheeli/` and the task are the servo's: the agent can read them,
    // not change them. The prompt is the agent's to read and keep.
    let servo = u64::from(saheeli_protocol::uids::SERVO);
    dir.set_uid(servo);
    dir.set_gid(servo);
    dir.set_size(0);
    b.append_data(&mut dir, ".saheeli", std::io::empty())?;
    for (name, data, mode, owner) in [
        ("prompt.md", body.as_bytes(), 0o644, AGENT_UID),
        (".saheeli/task.json", &task_json[..], 0o444, servo),
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_mode(mode);
        h.set_uid(owner);
        h.set_gid(owner);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, name, data)?;
    }
    Ok(b.into_inner()?)
}
