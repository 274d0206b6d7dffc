//! The core map: which cores run shards, and which partitions of which sink each shard owns.
//!
//! Explicit partitions (and the partitions of a `generate` source) are placed by the pins of
//! `[[runtime.pin]]` first; every other partition goes to the shard holding the fewest
//! partitions so far (ties to the lowest shard), in config order. The result depends only on
//! the config and the allowed cores, so two runs of the same file place partitions the same
//! way. A consumer-group sink has one member on every shard; Iggy deals its partitions.

use std::fmt::Write as _;

use crate::config::{Config, Cores, SourceKind};

/// The cores this process may run on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// Allowed and online core ids, ascending.
    pub cores: Vec<usize>,
}

impl Machine {
    /// Reads the allowed cores from `/proc/self/status` (`Cpus_allowed_list`), falling back to
    /// `/sys/devices/system/cpu/online`, then to `0..available_parallelism`.
    pub fn detect() -> Machine {
        let from_status = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                    .and_then(|list| parse_cpu_list(list.trim()))
            });
        let from_sys = || {
            std::fs::read_to_string("/sys/devices/system/cpu/online")
                .ok()
                .and_then(|s| parse_cpu_list(s.trim()))
        };
        let cores = from_status.or_else(from_sys).unwrap_or_else(|| {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            (0..n).collect()
        });
        Machine { cores }
    }

    fn describe(&self) -> String {
        let list: Vec<String> = self.cores.iter().map(|c| c.to_string()).collect();
        list.join(", ")
    }
}

/// Parses a kernel CPU list such as `0-3,8,10-11`.
pub fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a || b - a > 65_536 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.trim().parse().ok()?),
        }
    }
    out.sort_unstable();
    out.dedup();
    (!out.is_empty()).then_some(out)
}

/// What one sink does on one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkWork {
    /// Poll these partitions (explicit list or generate source).
    Partitions(Vec<u32>),
    /// Be one member of the sink's consumer group.
    GroupMember,
}

/// One sink on one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSink {
    /// Index into `config.sinks`.
    pub sink: usize,
    /// Its partitions here.
    pub work: SinkWork,
    /// The first shard this sink runs on: the one that does the sink's once-per-process work
    /// (the S3 sink's sweep of uploads an earlier run left open).
    pub lead: bool,
}

/// One shard: a thread pinned to `core`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardPlan {
    /// Shard number (0..).
    pub index: usize,
    /// The core it is pinned to.
    pub core: usize,
    /// The sinks with work on this shard.
    pub sinks: Vec<ShardSink>,
}

/// The resolved map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreMap {
    /// The core of the control thread.
    pub control_core: usize,
    /// One entry per shard.
    pub shards: Vec<ShardPlan>,
}

/// Resolves the map; a core that is not allowed, a duplicate, or a pin that names an unknown
/// sink, partition or core is an error as (key, message).
pub fn resolve(config: &Config, machine: &Machine) -> Result<CoreMap, (String, String)> {
    let allowed = |c: usize| machine.cores.contains(&c);
    let first = *machine.cores.first().ok_or_else(|| {
        (
            "runtime.cores".to_owned(),
            "this process may run on no core".to_owned(),
        )
    })?;
    if let Some(c) = config.runtime.control_core
        && !allowed(c)
    {
        return Err((
            "runtime.control_core".to_owned(),
            format!(
                "core {c} does not exist or is not allowed for this process (allowed: {})",
                machine.describe()
            ),
        ));
    }
    let (control_core, cores) = match &config.runtime.cores {
        Cores::Auto => {
            let control = config.runtime.control_core.unwrap_or(first);
            let mut cores: Vec<usize> = machine
                .cores
                .iter()
                .copied()
                .filter(|&c| c != control)
                .collect();
            if cores.is_empty() {
                cores.push(control);
            }
            (control, cores)
        }
        Cores::List(list) => {
            if list.is_empty() {
                return Err((
                    "runtime.cores".to_owned(),
                    "is empty: list at least one core, or write \"auto\"".to_owned(),
                ));
            }
            for (i, &c) in list.iter().enumerate() {
                if !allowed(c) {
                    return Err((
                        format!("runtime.cores[{i}]"),
                        format!(
                            "core {c} does not exist or is not allowed for this process (allowed: {})",
                            machine.describe()
                        ),
                    ));
                }
                if list[..i].contains(&c) {
                    return Err((
                        format!("runtime.cores[{i}]"),
                        format!("core {c} is listed twice"),
                    ));
                }
            }
            let control = config.runtime.control_core.unwrap_or_else(|| {
                machine
                    .cores
                    .iter()
                    .copied()
                    .find(|c| !list.contains(c))
                    .unwrap_or(first)
            });
            (control, list.clone())
        }
    };

    let mut shards: Vec<ShardPlan> = cores
        .iter()
        .enumerate()
        .map(|(index, &core)| ShardPlan {
            index,
            core,
            sinks: Vec::new(),
        })
        .collect();
    let mut load = vec![0usize; shards.len()];

    for (i, pin) in config.runtime.pin.iter().enumerate() {
        let key = |k: &str| format!("runtime.pin[{i}].{k}");
        let Some(sink) = config.sinks.iter().find(|s| s.name == pin.sink) else {
            return Err((key("sink"), format!("no sink is named {:?}", pin.sink)));
        };
        if !sink_partitions(sink).contains(&pin.partition) {
            return Err((
                key("partition"),
                format!(
                    "sink {:?} does not list partition {} (pins apply to explicit partitions and generate sources)",
                    pin.sink, pin.partition
                ),
            ));
        }
        if !cores.contains(&pin.core) {
            return Err((
                key("core"),
                format!("core {} runs no shard (shard cores: {:?})", pin.core, cores),
            ));
        }
        if config.runtime.pin[..i]
            .iter()
            .any(|p| p.sink == pin.sink && p.partition == pin.partition)
        {
            return Err((
                key("partition"),
                format!(
                    "partition {} of sink {:?} is pinned twice",
                    pin.partition, pin.sink
                ),
            ));
        }
    }

    for (sink_index, sink) in config.sinks.iter().enumerate() {
        if sink.source == SourceKind::Iggy && sink.consumer_group.is_some() {
            for (i, shard) in shards.iter_mut().enumerate() {
                shard.sinks.push(ShardSink {
                    sink: sink_index,
                    work: SinkWork::GroupMember,
                    lead: i == 0,
                });
            }
            continue;
        }
        let mut per_shard: Vec<Vec<u32>> = vec![Vec::new(); shards.len()];
        for partition in sink_partitions(sink) {
            let pinned = config
                .runtime
                .pin
                .iter()
                .find(|p| p.sink == sink.name && p.partition == partition)
                .and_then(|p| cores.iter().position(|&c| c == p.core));
            let shard = pinned.unwrap_or_else(|| {
                let mut best = 0;
                for (i, &l) in load.iter().enumerate() {
                    if l < load[best] {
                        best = i;
                    }
                }
                best
            });
            load[shard] += 1;
            per_shard[shard].push(partition);
        }
        let mut lead = true;
        for (shard, partitions) in shards.iter_mut().zip(per_shard) {
            if !partitions.is_empty() {
                shard.sinks.push(ShardSink {
                    sink: sink_index,
                    work: SinkWork::Partitions(partitions),
                    lead,
                });
                lead = false;
            }
        }
    }
    // Client ids must differ between shards, or the broker drops one connection for the other.
    for (sink_index, sink) in config.sinks.iter().enumerate() {
        let Some(mqtt) = &sink.mqtt else {
            continue;
        };
        let on = shards
            .iter()
            .filter(|s| s.sinks.iter().any(|w| w.sink == sink_index))
            .count();
        if on > 1 && !mqtt.client_id.has(crate::template::Name::Shard) {
            return Err((
                format!("sink[{sink_index}].mqtt.client_id"),
                format!(
                    "must contain {{shard}}: the sink runs on {on} shards and a broker drops the older of two connections with one client id"
                ),
            ));
        }
    }
    Ok(CoreMap {
        control_core,
        shards,
    })
}

fn sink_partitions(sink: &crate::config::SinkConfig) -> Vec<u32> {
    match sink.source {
        SourceKind::Iggy => sink.partitions.clone().unwrap_or_default(),
        SourceKind::Generate => (0..sink.generate.as_ref().map_or(1, |g| g.partitions)).collect(),
    }
}

impl CoreMap {
    /// The map as `spillway check` prints it.
    pub fn render(&self, config: &Config) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "control thread: core {}", self.control_core);
        let _ = writeln!(out, "shards: {}", self.shards.len());
        for shard in &self.shards {
            let _ = writeln!(out, "shard {} on core {}:", shard.index, shard.core);
            if shard.sinks.is_empty() {
                let _ = writeln!(out, "  (no partitions)");
            }
            for s in &shard.sinks {
                let sink = &config.sinks[s.sink];
                let source = match sink.source {
                    SourceKind::Iggy => format!(
                        "{}/{}",
                        sink.stream
                            .as_ref()
                            .map(|s| s.to_string())
                            .unwrap_or_default(),
                        sink.topic
                            .as_ref()
                            .map(|s| s.to_string())
                            .unwrap_or_default()
                    ),
                    SourceKind::Generate => "generate".to_owned(),
                };
                let what = match &s.work {
                    SinkWork::Partitions(p) => {
                        let list: Vec<String> = p.iter().map(|p| p.to_string()).collect();
                        format!("partitions {}", list.join(", "))
                    }
                    SinkWork::GroupMember => format!(
                        "member of consumer group {:?} (Iggy assigns the partitions at run time)",
                        sink.consumer_group.as_deref().unwrap_or_default()
                    ),
                };
                let kind = format!("{:?}", sink.kind).to_lowercase();
                let _ = writeln!(out, "  sink {:?} ({kind}) {source}: {what}", sink.name);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config(text: &str) -> Config {
        match crate::config::parse(text, Path::new("t.toml"), &|_| None) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    }

    const BASE: &str = r#"
        [iggy]
        username = "u"
        password = "p"
        [[sink]]
        name = "a"
        type = "stdout"
        stream = "s"
        topic = "t"
        partitions = [0, 1, 2, 3, 4]
    "#;

    #[test]
    fn cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("5"), Some(vec![5]));
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn spreads_evenly_and_deterministically() {
        let c = config(&format!("{BASE}\n[runtime]\ncores = [1, 2]\n"));
        let m = Machine {
            cores: vec![0, 1, 2],
        };
        let map = resolve(&c, &m).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(map.control_core, 0);
        assert_eq!(map.shards.len(), 2);
        assert_eq!(
            map.shards[0].sinks[0].work,
            SinkWork::Partitions(vec![0, 2, 4])
        );
        assert_eq!(
            map.shards[1].sinks[0].work,
            SinkWork::Partitions(vec![1, 3])
        );
        // One shard per sink does the once-per-process work: the first one it runs on.
        assert!(map.shards[0].sinks[0].lead);
        assert!(!map.shards[1].sinks[0].lead);
        assert_eq!(resolve(&c, &m), Ok(map));
    }

    #[test]
    fn auto_leaves_the_control_core_out() {
        let c = config(BASE);
        let map = resolve(
            &c,
            &Machine {
                cores: vec![0, 1, 2, 3],
            },
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(map.control_core, 0);
        let cores: Vec<usize> = map.shards.iter().map(|s| s.core).collect();
        assert_eq!(cores, vec![1, 2, 3]);
        let single = resolve(&c, &Machine { cores: vec![0] }).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(single.shards.len(), 1);
    }

    #[test]
    fn pins_win() {
        let c = config(&format!(
            "{BASE}\n[runtime]\ncores = [1, 2]\n[[runtime.pin]]\nsink = \"a\"\npartition = 0\ncore = 2\n"
        ));
        let map = resolve(
            &c,
            &Machine {
                cores: vec![0, 1, 2],
            },
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        // Partition 0 is pinned to core 2 (shard 1); the rest fill the least-loaded shard.
        assert_eq!(
            map.shards[1].sinks[0].work,
            SinkWork::Partitions(vec![0, 3])
        );
        assert_eq!(
            map.shards[0].sinks[0].work,
            SinkWork::Partitions(vec![1, 2, 4])
        );
    }

    #[test]
    fn bad_cores_and_pins_are_named() {
        let m = Machine { cores: vec![0, 1] };
        let c = config(&format!("{BASE}\n[runtime]\ncores = [1, 7]\n"));
        let (key, msg) = resolve(&c, &m).err().unwrap_or_default();
        assert_eq!(key, "runtime.cores[1]");
        assert!(msg.contains("core 7 does not exist"), "{msg}");
        let c = config(&format!(
            "{BASE}\n[[runtime.pin]]\nsink = \"zz\"\npartition = 0\ncore = 1\n"
        ));
        assert_eq!(
            resolve(&c, &m).err().unwrap_or_default().0,
            "runtime.pin[0].sink"
        );
        let c = config(&format!(
            "{BASE}\n[[runtime.pin]]\nsink = \"a\"\npartition = 9\ncore = 1\n"
        ));
        assert_eq!(
            resolve(&c, &m).err().unwrap_or_default().0,
            "runtime.pin[0].partition"
        );
    }
}
