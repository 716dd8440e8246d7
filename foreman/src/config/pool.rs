//! `pool:`: classes of warm servos (issue 28). Each class keeps `size`
//! servos started and idle for tasks whose image, network and resources
//! are exactly the class's (each defaulting to the task defaults); a task
//! is served by the first class that is its own, and launches cold when
//! none is or the class has none idle.

use std::time::Duration;

use saheeli_protocol::NetworkMode;
use saheeli_protocol::front_matter::{Resources, parse_duration_value};
use serde::Deserialize;

use super::{Concurrency, ConfigFile};

/// One `pool:` entry as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PoolClass {
    /// Servos kept started and idle: a number, or `auto` (from recent demand).
    pub size: Concurrency,
    /// A servo idle this long is replaced by a fresh one.
    #[serde(
        default = "default_max_idle",
        deserialize_with = "parse_duration_value"
    )]
    pub max_idle: Duration,
    /// Unset: `image:`.
    #[serde(default)]
    pub image: Option<String>,
    /// Unset: `task.network`.
    #[serde(default)]
    pub network: Option<NetworkMode>,
    /// Each unset one: the task default.
    #[serde(default)]
    pub resources: Option<Resources>,
    /// A cached set-up (its key, or a unique start of it, as `saheeli
    /// cache ls` shows it): the class's servos start with it unpacked,
    /// for tasks whose set-up has that key (issue 50).
    #[serde(default)]
    pub setup_key: Option<String>,
}

fn default_max_idle() -> Duration {
    Duration::from_secs(600)
}

/// A class with every default filled in: what its servos are made with,
/// and what a task must ask for to be served by one.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct WarmClass {
    /// Its place in `pool:` (labels, logs, metrics).
    pub index: usize,
    pub size: Concurrency,
    pub max_idle: Duration,
    pub image: String,
    pub network: NetworkMode,
    pub memory: u64,
    pub cpus: f64,
    pub pids: i64,
    pub disk: u64,
    /// The cached set-up its servos hold (a key or its start).
    pub setup_key: Option<String>,
}

impl ConfigFile {
    /// The `pool:` classes with the defaults filled in (none: no pool).
    pub fn warm_classes(&self) -> Vec<WarmClass> {
        let t = &self.task;
        self.pool
            .iter()
            .enumerate()
            .map(|(index, c)| {
                let r = c.resources.clone().unwrap_or_default();
                WarmClass {
                    index,
                    size: c.size,
                    max_idle: c.max_idle,
                    image: c.image.clone().unwrap_or_else(|| self.image.clone()),
                    network: c.network.unwrap_or(t.network),
                    memory: r.memory.map_or(t.memory.0, |m| m.0),
                    cpus: r.cpus.unwrap_or(t.cpus),
                    pids: r.pids.unwrap_or(t.pids),
                    disk: r.disk.map_or(t.disk.0, |d| d.0),
                    setup_key: c.setup_key.clone(),
                }
            })
            .collect()
    }

    /// Each class must be one a task could ask for: within `limits:`.
    pub(super) fn check_pool(&self) -> Result<(), String> {
        let l = &self.limits;
        for c in self.warm_classes() {
            let at = format!("`pool[{}]`", c.index);
            let over = |key: &str| {
                Err(format!(
                    "{at}: `resources.{key}` is above `limits.{key}`: no task could use this class; lower it"
                ))
            };
            if c.memory > l.memory.0 {
                return over("memory");
            }
            if c.cpus > l.cpus || c.cpus.is_nan() || c.cpus <= 0.0 {
                return over("cpus");
            }
            if c.pids > l.pids || c.pids < 16 {
                return over("pids");
            }
            if c.disk > l.disk.0 {
                return over("disk");
            }
            if !l.networks.contains(&c.network) {
                return Err(format!(
                    "{at}: `network: {}` is not in `limits.networks`; no task could use this class",
                    c.network.as_str()
                ));
            }
            if c.max_idle < Duration::from_secs(1) {
                return Err(format!("{at}: `max_idle` must be at least 1s"));
            }
            if let Some(key) = &c.setup_key
                && (key.len() < 4
                    || key.len() > 64
                    || !key.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            {
                return Err(format!(
                    "{at}: `setup_key` must be a set-up cache key or its start (4 to 64 hex digits, as `saheeli cache ls` shows it)"
                ));
            }
        }
        Ok(())
    }
}

/// What a task asks of its servo, as a class compares it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct WarmNeeds {
    pub image: String,
    pub network: NetworkMode,
    pub memory: u64,
    pub cpus: f64,
    pub pids: i64,
    pub disk: u64,
    /// The task's set-up, when a cached one may serve it (its key is
    /// known only with the image's id: the pool compares it).
    pub setup: Option<SetupNeeds>,
}

/// A task's set-up as its cache key is made of (with the image's id).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SetupNeeds {
    pub commands: Vec<String>,
    pub files_digest: Option<String>,
}

impl WarmClass {
    /// Whether a task asking `needs` may be this class's: every one
    /// equal, and a set-up exactly when the class holds one (whose key
    /// must then be the task's: `key_is` says whether it is).
    pub fn serves(&self, needs: &WarmNeeds, key_is: impl Fn(&SetupNeeds) -> bool) -> bool {
        let setup = match (&self.setup_key, &needs.setup) {
            (None, None) => true,
            (Some(_), Some(s)) => key_is(s),
            _ => false,
        };
        self.image == needs.image
            && self.network == needs.network
            && self.memory == needs.memory
            && self.cpus == needs.cpus
            && self.pids == needs.pids
            && self.disk == needs.disk
            && setup
    }
}

/// The first class that serves `needs`, if any (else the task goes
/// cold); `key_is(class, setup)`: whether class's cached set-up has the
/// key of the task's `setup`.
pub(crate) fn class_for<'a>(
    classes: &'a [WarmClass],
    needs: &WarmNeeds,
    key_is: impl Fn(&WarmClass, &SetupNeeds) -> bool,
) -> Option<&'a WarmClass> {
    classes.iter().find(|c| c.serves(needs, |s| key_is(c, s)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(yaml: &str) -> ConfigFile {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn needs(f: &ConfigFile) -> WarmNeeds {
        let t = &f.task;
        WarmNeeds {
            image: f.image.clone(),
            network: t.network,
            memory: t.memory.0,
            cpus: t.cpus,
            pids: t.pids,
            disk: t.disk.0,
            setup: None,
        }
    }

    fn plain(classes: &[WarmClass], needs: &WarmNeeds) -> Option<usize> {
        class_for(classes, needs, |_, _| false).map(|c| c.index)
    }

    #[test]
    fn a_task_is_served_by_the_first_class_that_is_exactly_its_own() {
        let f = file(
            "pool:\n  - { size: 8, max_idle: 10m }\n  - { size: 2, resources: { memory: 4g, cpus: 2 } }\n",
        );
        let classes = f.warm_classes();
        assert_eq!(classes.len(), 2);
        assert_eq!(classes[0].max_idle, Duration::from_secs(600));
        let default = needs(&f);
        assert_eq!(plain(&classes, &default), Some(0));
        let big = WarmNeeds {
            memory: 4 << 30,
            cpus: 2.0,
            ..default.clone()
        };
        assert_eq!(plain(&classes, &big), Some(1));
        // Each field that differs from every class: cold.
        let cases = [
            WarmNeeds {
                memory: 3 << 30,
                ..default.clone()
            },
            WarmNeeds {
                cpus: 0.5,
                ..default.clone()
            },
            WarmNeeds {
                pids: 100,
                ..default.clone()
            },
            WarmNeeds {
                disk: 1 << 30,
                ..default.clone()
            },
            WarmNeeds {
                network: NetworkMode::Bridge,
                ..default.clone()
            },
            WarmNeeds {
                image: "other:1".into(),
                ..default.clone()
            },
            WarmNeeds {
                memory: 4 << 30,
                ..default.clone()
            },
        ];
        for n in cases {
            assert_eq!(plain(&classes, &n), None, "{n:?}");
        }
        assert!(plain(&file("{}").warm_classes(), &default).is_none());
        assert!(plain(&file("pool: []").warm_classes(), &default).is_none());
    }

    /// A class holding a cached set-up serves only tasks whose set-up has
    /// its key; a plain class never serves a task with a set-up.
    #[test]
    fn a_set_up_class_serves_only_its_own_key() {
        let f = file("pool:\n  - { size: 1, setup_key: abcd1234 }\n  - { size: 1 }\n");
        let classes = f.warm_classes();
        assert_eq!(classes[0].setup_key.as_deref(), Some("abcd1234"));
        let ours = SetupNeeds {
            commands: vec!["make env".into()],
            files_digest: None,
        };
        let is_ours = |c: &WarmClass, s: &SetupNeeds| c.index == 0 && *s == ours;
        let with = |commands: &str| WarmNeeds {
            setup: Some(SetupNeeds {
                commands: vec![commands.into()],
                files_digest: None,
            }),
            ..needs(&f)
        };
        let at = |n: &WarmNeeds| class_for(&classes, n, is_ours).map(|c| c.index);
        assert_eq!(at(&with("make env")), Some(0));
        assert_eq!(at(&with("make other")), None, "another key: cold");
        assert_eq!(at(&needs(&f)), Some(1), "no set-up: the plain class");
        assert!(f.check_pool().is_ok());
        for bad in ["xyz1", "ab", "ABCD1234", "abcd-123"] {
            let e = file(&format!("pool: [{{ size: 1, setup_key: {bad} }}]"))
                .check_pool()
                .unwrap_err();
            assert!(e.contains("setup_key"), "{e}");
        }
    }

    #[test]
    fn classes_outside_the_limits_or_misspelt_are_refused() {
        assert!(file("pool: [{ size: auto }]").check_pool().is_ok());
        let e = file("pool: [{ size: 1, resources: { memory: 64g } }]")
            .check_pool()
            .unwrap_err();
        assert!(
            e.contains("`pool[0]`") && e.contains("limits.memory"),
            "{e}"
        );
        let e = file("pool: [{ size: 1, network: host }]")
            .check_pool()
            .unwrap_err();
        assert!(e.contains("limits.networks"), "{e}");
        assert!(serde_yaml::from_str::<ConfigFile>("pool: [{ size: 0 }]").is_err());
        assert!(serde_yaml::from_str::<ConfigFile>("pool: [{ size: 2, env: {A: b} }]").is_err());
    }
}
