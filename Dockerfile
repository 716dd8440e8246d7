# The servo image, built by `saheeli build-servo` through the Docker API
# (classic builder, never pulls). The servo binary is compiled on the host
# (Debian 12, the same glibc as bookworm) and copied in, so no Rust
# toolchain image is needed. BASE is made locally by scripts/setup.sh.
ARG BASE=saheeli-base:bookworm
FROM ${BASE}

# Two users, never one: `agent` (1000) runs every tool, shell and agent
# CLI and owns the workspace's files; `saheeli` (999) is the servo, which
# alone can reach the gateway socket and write its session and audit log.
# Named because Docker's archive API looks owners up by name for every
# file (an unnamed uid made downloads ~10x slower). No file keeps a setuid
# or setgid bit: nothing in the image can lift a process to root.
RUN echo 'agent:x:1000:1000:agent:/tmp:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'agent:x:1000:' >> /etc/group \
 && echo 'saheeli:x:999:999:saheeli servo:/nonexistent:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'saheeli:x:999:' >> /etc/group \
 && find / -xdev -type f -perm /6000 -exec chmod ug-s {} +

# /workspace is the servo's directory, writable by the agent's group: both
# add their files there, and the sticky bit keeps the agent from removing
# or renaming the servo's (its session, its audit log). A task's volume
# inherits this when it is first mounted.
COPY --chown=999:1000 workspace/ /workspace/
RUN chmod 1775 /workspace
# The two mount points every task container gets that the base image
# lacks: the gateway's directory and the init Docker binds in. Made here,
# runc need not add them to each container's own layer at start (with
# Docker's fuse-overlayfs driver, a copy-up of /run and /usr/sbin and two
# new files on the host's disk per task).
RUN mkdir -p /run/saheeli && touch /usr/sbin/docker-init
# The foreman starts the container as root with CAP_SETUID/CAP_SETGID/CAP_KILL only
# and SAHEELI_PRIVSEP=1; run by hand, the servo is the agent's user.
USER 1000:1000
WORKDIR /workspace
ENV HOME=/tmp
ENTRYPOINT ["/usr/local/bin/servo"]

# Last, so that rebuilding after a servo change redoes only this step.
COPY servo /usr/local/bin/servo
