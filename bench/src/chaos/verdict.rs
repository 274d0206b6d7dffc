//! After the campaign: every offset Iggy holds looked for in what the broker acknowledged and
//! in the objects the store kept, the stored offsets checked, and the report.

use super::*;

impl<'a> Campaign<'a> {
    /// The stored offset of `group` on `partition`; `Err` when Iggy did not answer (the
    /// connection is dropped and made again next time).
    pub(super) fn group_stored(&mut self, group: &str, partition: u32) -> Result<Option<u64>, ()> {
        let stream = self.world.stream.clone();
        let Some(admin) = self.admin() else {
            return Err(());
        };
        match admin.stored_offset(
            &TestConsumer::Group(group.to_owned()),
            &stream,
            TOPIC,
            partition,
        ) {
            Ok(s) => Ok(s),
            Err(_) => {
                self.admin = None;
                Err(())
            }
        }
    }

    /// The offsets the MQTT group stored must all have been acknowledged by the broker.
    pub(super) fn check_mqtt_stored(&mut self) {
        for p in 0..PARTITIONS {
            // The server is restarting, or the connection was lost: next time.
            let Ok(stored) = self.group_stored(MQTT_SINK, p) else {
                return;
            };
            let Some(stored) = stored else { continue };
            // Acknowledgements read after the stored offset, so none is missed.
            collect_acks(&self.world.mqtt, &mut self.acked);
            let from = self.mqtt_verified[p as usize];
            let missing = (from..=stored).find(|o| !self.acked.contains_key(&(p, *o)));
            if let Some(o) = missing {
                self.outcome.premature += 1;
                note(
                    &mut self.outcome.first_problems,
                    format!(
                        "MQTT: the group stored offset {stored} of partition {p} while offset \
                         {o} was not acknowledged ({:.1} s)",
                        self.started.elapsed().as_secs_f64()
                    ),
                );
            }
            // Reported once: the next check starts past it.
            self.mqtt_verified[p as usize] = self.mqtt_verified[p as usize].max(stored + 1);
        }
    }

    /// The offsets the S3 group stored must all be in complete objects.
    pub(super) fn check_s3_stored(&mut self) {
        let mut stored = Vec::new();
        for p in 0..PARTITIONS {
            let Ok(s) = self.group_stored(S3_SINK, p) else {
                return;
            };
            stored.push(s);
        }
        // The objects after the stored offsets, so none completed before is missed.
        if self.objects.scan(&self.world.s3).is_err() {
            return;
        }
        for (p, s) in (0..PARTITIONS).zip(stored) {
            let Some(s) = s else { continue };
            let from = self.s3_verified[p as usize];
            let missing = (from..=s).find(|o| !self.objects.present.contains(&(p, *o)));
            if let Some(o) = missing {
                self.outcome.s3_premature += 1;
                note(
                    &mut self.outcome.first_problems,
                    format!(
                        "S3: the group stored offset {s} of partition {p} while offset {o} was \
                         in no complete object ({:.1} s)",
                        self.started.elapsed().as_secs_f64()
                    ),
                );
            }
            self.s3_verified[p as usize] = self.s3_verified[p as usize].max(s + 1);
        }
    }

    /// The end: no more faults; the engines (restarted if needed) catch up, stop, and every
    /// offset is checked.
    pub(super) fn finish(mut self) -> Result<Outcome, String> {
        (self.progress)("catching up");
        for m in &mut self.members {
            m.paused_until = None;
            if let Some(p) = &m.process {
                p.resume();
            }
        }
        self.cut_until = None;
        self.world.cut.black_hole(false);
        let heads = heads(&mut reconnect(&self.addr)?, &self.world.stream)?;
        for i in 0..self.members.len() {
            if self.members[i].process.is_none() {
                self.start_member(i)?;
            }
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            self.tick()?;
            let mut done = true;
            for (p, head) in &heads {
                let Some(head) = head else { continue };
                for group in [MQTT_SINK, S3_SINK] {
                    let stored = self.group_stored(group, *p).ok().flatten();
                    done &= stored.is_some_and(|s| s >= *head);
                }
            }
            if done {
                break;
            }
            if Instant::now() > deadline {
                let mut stored = String::new();
                for (p, head) in &heads {
                    let m = self.group_stored(MQTT_SINK, *p).ok().flatten();
                    let s = self.group_stored(S3_SINK, *p).ok().flatten();
                    let _ = write!(
                        stored,
                        "\n  partition {p}: head {head:?}, stored by {MQTT_SINK} {m:?}, by \
                         {S3_SINK} {s:?}"
                    );
                }
                let tails = self.log_tails(30);
                self.save_logs();
                return Err(format!(
                    "the engines did not catch up within 120 s after the campaign:{stored}\n\
                     fault timeline:\n  {}\n{tails}\nlogs: {}",
                    self.outcome.timeline.join("\n  "),
                    self.world.logs.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // A last look at the stored offsets, then a clean stop of both.
        self.check_s3_stored();
        for i in 0..self.members.len() {
            let name = self.members[i].name;
            if let Some(p) = self.members[i].process.as_mut() {
                let asked = Instant::now();
                if let Err(e) = p.stop(Duration::from_secs(30)) {
                    self.outcome.engine_problems.push(format!(
                        "engine {name}, stopped with SIGTERM at the end: {e}"
                    ));
                }
                self.outcome.stops.push((name, asked.elapsed()));
            }
            self.retire_member(i);
        }
        self.save_logs();
        collect_acks(&self.world.mqtt, &mut self.acked);
        self.compare(&heads)?;
        Ok(self.outcome)
    }

    /// Against what Iggy holds.
    pub(super) fn compare(&mut self, heads: &[(u32, Option<u64>)]) -> Result<(), String> {
        let held = read_back(&mut reconnect(&self.addr)?, &self.world.stream, heads)?;
        let o = &mut self.outcome;
        o.in_iggy = held.len() as u64;
        let records = s3_records(&self.world.s3)?;
        for ((p, off), payload) in &held {
            match self.acked.get(&(*p, *off)) {
                None => {
                    o.mqtt_lost += 1;
                    note(
                        &mut o.first_problems,
                        format!(
                            "MQTT: offset {off} of partition {p} never acknowledged by the broker"
                        ),
                    );
                }
                Some(n) => o.mqtt_duplicates += u64::from(n.saturating_sub(1)),
            }
            // The producer's payloads are JSON, embedded as JSON in the records.
            let payload: serde_json::Value = serde_json::from_slice(payload).unwrap_or_else(|_| {
                serde_json::Value::String(String::from_utf8_lossy(payload).into())
            });
            match records.get(&(*p, *off)) {
                None => {
                    o.s3_lost += 1;
                    note(
                        &mut o.first_problems,
                        format!("S3: offset {off} of partition {p} in no object"),
                    );
                }
                Some(stored) => {
                    o.s3_duplicates += (stored.len() as u64).saturating_sub(1);
                    if stored.len() > 1 {
                        note(
                            &mut o.first_problems,
                            format!(
                                "S3: offset {off} of partition {p} in {} objects: {}",
                                stored.len(),
                                stored
                                    .iter()
                                    .map(|(key, _)| key.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        );
                    }
                    if stored.iter().any(|(_, s)| *s != payload) {
                        o.s3_wrong_payload += 1;
                        note(
                            &mut o.first_problems,
                            format!("S3: offset {off} of partition {p} holds another payload"),
                        );
                    }
                }
            }
        }
        Ok(())
    }
}

impl SeenObjects {
    /// Reads the objects not read yet (or changed since).
    pub(super) fn scan(&mut self, s3: &S3Server) -> Result<(), String> {
        let bucket = s3.bucket_dir();
        let dir = bucket.join(PREFIX.trim_end_matches('/'));
        if !dir.exists() {
            return Ok(());
        }
        let files = spillway_tests::object_files(&dir).map_err(|e| e.to_string())?;
        for path in files {
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            let stamp = (meta.len(), meta.modified().ok());
            if self.files.get(&path) == Some(&stamp) {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            for line in text.lines() {
                let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                    continue;
                };
                if let (Some(p), Some(o)) = (v["partition"].as_u64(), v["offset"].as_u64()) {
                    self.present.insert((p as u32, o));
                }
            }
            self.files.insert(path, stamp);
        }
        Ok(())
    }
}

pub(super) fn report(
    o: &Outcome,
    secs: u64,
    seed: u64,
    took: Duration,
) -> (Vec<Row>, String, Vec<String>) {
    let total: u64 = o.faults.values().sum();
    let mut text = String::new();
    let _ = writeln!(
        text,
        "\nspillway-bench chaos: {secs} s of faults (seed {seed:#x}: {SEED_ENV}={seed:#x} replays \
         it; {:.0} s in all with the catch-up) against the real Iggy server (2 s heartbeat), \
         mosquitto and s3s-fs; two engines in the consumer groups {MQTT_SINK} (MQTT QoS 1) and \
         {S3_SINK} (S3 json_lines) on {PARTITIONS} partitions\n",
        took.as_secs_f64()
    );
    let _ = writeln!(text, "faults injected: {total}");
    for kind in Fault::ALL {
        let n = o.faults.get(&kind).copied().unwrap_or(0);
        let _ = writeln!(text, "  {}: {n}", kind.label());
    }
    let _ = writeln!(text, "\nfault timeline:");
    for line in &o.timeline {
        let _ = writeln!(text, "  {line}");
    }
    let _ = writeln!(
        text,
        "\ngroup assignments logged by the engines: {}; S3 partitions fenced (taken over by the \
         other engine at the store): {}",
        o.assignments, o.fenced
    );
    let stops: Vec<String> = o
        .stops
        .iter()
        .map(|(name, took)| {
            // The engines run with runtime.shutdown_timeout = "20s".
            let cut_short = if *took >= Duration::from_secs(19) {
                " (drained until runtime.shutdown_timeout: see its log)"
            } else {
                ""
            };
            format!("{name} {:.1} s{cut_short}", took.as_secs_f64())
        })
        .collect();
    let _ = writeln!(
        text,
        "engines stopped with SIGTERM at the end in: {}",
        stops.join(", ")
    );
    let _ = writeln!(text, "messages in Iggy: {}", o.in_iggy);
    let _ = writeln!(
        text,
        "MQTT (at least once): lost {}, duplicates {}\nS3 (exactly once): lost {}, duplicates {}, \
         other payload {}\nstored before confirmed: MQTT {}, S3 {}",
        o.mqtt_lost,
        o.mqtt_duplicates,
        o.s3_lost,
        o.s3_duplicates,
        o.s3_wrong_payload,
        o.premature,
        o.s3_premature
    );
    for p in &o.engine_problems {
        let _ = writeln!(text, "  {p}");
    }
    for p in &o.first_problems {
        let _ = writeln!(text, "  {p}");
    }
    let _ = writeln!(text, "logs and timeline: {}", o.logs.display());
    let mut problems = Vec::new();
    let early = o.premature + o.s3_premature;
    if o.mqtt_lost + o.s3_lost + o.s3_duplicates + o.s3_wrong_payload + early > 0 {
        problems.push(format!(
            "chaos (seed {seed:#x}): {} lost to MQTT, {} lost / {} duplicated / {} changed in S3, \
             {} stored early (MQTT {}, S3 {}); logs in {}",
            o.mqtt_lost,
            o.s3_lost,
            o.s3_duplicates,
            o.s3_wrong_payload,
            early,
            o.premature,
            o.s3_premature,
            o.logs.display()
        ));
    }
    for p in &o.engine_problems {
        problems.push(format!("chaos (seed {seed:#x}): {p}"));
    }
    if o.in_iggy == 0 {
        problems.push("chaos: no message reached Iggy".to_owned());
    }
    let row = |metric: &'static str, value: f64, unit: &'static str| Row {
        scenario: format!("chaos_{secs}s"),
        metric,
        ours: value,
        peer: f64::NAN,
        peer_name: "-",
        unit,
        better: Better::Lower,
    };
    let mut rows = vec![Row {
        better: Better::Neither,
        ..row("faults", total as f64, "faults injected")
    }];
    for kind in Fault::ALL {
        rows.push(Row {
            better: Better::Neither,
            ..row(
                kind.metric(),
                o.faults.get(&kind).copied().unwrap_or(0) as f64,
                "faults injected",
            )
        });
    }
    rows.extend([
        Row {
            better: Better::Neither,
            ..row("messages", o.in_iggy as f64, "messages in Iggy")
        },
        Row {
            better: Better::Neither,
            ..row(
                "group_assignments",
                o.assignments as f64,
                "assignments logged",
            )
        },
        Row {
            better: Better::Neither,
            ..row("s3_fenced", o.fenced as f64, "partitions fenced")
        },
        row("mqtt_lost", o.mqtt_lost as f64, "messages"),
        row("mqtt_duplicates", o.mqtt_duplicates as f64, "messages"),
        row("s3_lost", o.s3_lost as f64, "messages"),
        row("s3_duplicates", o.s3_duplicates as f64, "messages"),
        row("stored_early", o.premature as f64, "offsets"),
        row("s3_stored_early", o.s3_premature as f64, "offsets"),
        row(
            "engine_problems",
            o.engine_problems.len() as f64,
            "engine exits",
        ),
    ]);
    (rows, text, problems)
}
