# The servo image, built by `saheeli build-servo` through the Docker API
# (classic builder, never pulls). The servo binary is compiled on the host
# (Debian 12, the same glibc as bookworm) and copied in, so no Rust
# toolchain image is needed. BASE is made locally by scripts/setup.sh.
ARG BASE=saheeli-base:bookworm
FROM ${BASE}

# The servo user gets a name: Docker's archive API looks owners up by
# name for every file, and an unnamed uid made downloads ~10x slower.
RUN echo 'servo:x:1000:1000:servo:/tmp:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'servo:x:1000:' >> /etc/group

# /workspace belongs to the unprivileged servo user; a task's named volume
# inherits this ownership when it is first mounted.
COPY --chown=1000:1000 workspace/ /workspace/
USER 1000:1000
WORKDIR /workspace
ENV HOME=/tmp
ENTRYPOINT ["/usr/local/bin/servo"]

# Last, so that rebuilding after a servo change redoes only this step.
COPY servo /usr/local/bin/servo
