//! The campaign's run: the engines as members, the nemesis and its faults, the waits and the
//! checks made while it runs.

use super::*;

impl<'a> Campaign<'a> {
    /// The last `lines` lines of each engine's log, for an error.
    pub(super) fn log_tails(&self, lines: usize) -> String {
        self.members
            .iter()
            .map(|m| {
                let tail = m
                    .process
                    .as_ref()
                    .map(|p| p.log_tail(lines))
                    .unwrap_or_default();
                format!("engine {}'s log:\n{tail}", m.name)
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub(super) fn new(world: World, seed: u64, progress: &'a mut dyn FnMut(&str)) -> Campaign<'a> {
        let addr = world.iggy_at();
        let outcome = Outcome {
            logs: world.logs.clone(),
            ..Outcome::default()
        };
        Campaign {
            members: ENGINES
                .iter()
                .map(|&name| Member {
                    name,
                    process: None,
                    runs: 0,
                    paused_until: None,
                })
                .collect(),
            world,
            addr,
            admin: None,
            acked: HashMap::new(),
            mqtt_verified: vec![0; PARTITIONS as usize],
            s3_verified: vec![0; PARTITIONS as usize],
            objects: SeenObjects::default(),
            next_check: Instant::now(),
            next_s3_check: Instant::now(),
            cut_until: None,
            outcome,
            started: Instant::now(),
            rng: fastrand::Rng::with_seed(seed),
            progress,
        }
    }

    pub(super) fn run(mut self, length: Duration) -> Result<Outcome, String> {
        let stop = Arc::new(AtomicBool::new(false));
        // While set, the producer holds its batches: the Iggy server is being killed.
        let hold = Arc::new(AtomicBool::new(false));
        let producer = {
            let (stop, hold) = (Arc::clone(&stop), Arc::clone(&hold));
            let stream = self.world.stream.clone();
            let addr = self.addr.clone();
            std::thread::spawn(move || produce(&addr, &stream, &stop, &hold))
        };
        let result = self.faults(length, &hold);
        stop.store(true, Ordering::SeqCst);
        let _ = producer.join();
        if let Err(e) = result {
            self.save_logs();
            return Err(format!(
                "{e}\nfault timeline:\n  {}\nlogs: {}",
                self.outcome.timeline.join("\n  "),
                self.world.logs.display()
            ));
        }
        self.finish()
    }

    /// The campaign proper: the engines in their group, then a fault every 1.5-4 s.
    pub(super) fn faults(&mut self, length: Duration, hold: &AtomicBool) -> Result<(), String> {
        for i in 0..self.members.len() {
            self.start_member(i)?;
        }
        self.await_assignments()?;
        self.started = Instant::now();
        let end = self.started + length;
        let mut next_fault = Instant::now() + Duration::from_millis(self.rng.u64(FAULT_EVERY_MS));
        while Instant::now() < end {
            self.tick()?;
            if Instant::now() < next_fault {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            next_fault = Instant::now() + Duration::from_millis(self.rng.u64(FAULT_EVERY_MS));
            // Every fault draws the same values, whichever it is, so a seed replays the same
            // choices even when timing makes one of them extend a pause or a cut.
            // A run on one server draws from the kinds before the leader kill, as it always did
            // (a seed replays the same choices).
            let kinds = match self.world.iggy {
                IggyKind::Single(_) => &Fault::ALL[..Fault::ALL.len() - 1],
                IggyKind::Cluster(_) => &Fault::ALL[..],
            };
            let drawn = kinds[self.rng.usize(..kinds.len())];
            let target = self.rng.usize(..self.members.len());
            let fraction = self.rng.f64();
            let sub_seed = self.rng.u64(..);
            // The first two faults are always a pause and a cut: even the one-minute run has
            // both.
            let injected: u64 = self.outcome.faults.values().sum();
            let kind = match injected {
                0 => Fault::EnginePause,
                1 => Fault::IggyCut,
                _ => drawn,
            };
            // On a cluster the Iggy faults are leader kills: the engines are given every node
            // (no cut proxy), and a kill of a whole one-node server is the single run's.
            let kind = match (&self.world.iggy, kind) {
                (IggyKind::Cluster(_), Fault::IggyCut | Fault::IggyKill) => Fault::IggyLeaderKill,
                (IggyKind::Single(_), Fault::IggyLeaderKill) => Fault::IggyKill,
                (_, kind) => kind,
            };
            *self.outcome.faults.entry(kind).or_default() += 1;
            self.inject(kind, target, fraction, sub_seed, hold)?;
        }
        Ok(())
    }

    pub(super) fn within(range: &Range<u64>, fraction: f64) -> Duration {
        let span = (range.end - range.start) as f64;
        Duration::from_millis(range.start + (span * fraction) as u64)
    }

    pub(super) fn note_fault(&mut self, what: String) {
        let line = format!("{:>5.1}s  {what}", self.started.elapsed().as_secs_f64());
        (self.progress)(&line);
        self.outcome.timeline.push(line);
    }

    pub(super) fn inject(
        &mut self,
        kind: Fault,
        target: usize,
        fraction: f64,
        sub_seed: u64,
        hold: &AtomicBool,
    ) -> Result<(), String> {
        let name = self.members[target].name;
        match kind {
            Fault::EngineKill => {
                let gap = Self::within(&(100..800), fraction);
                self.note_fault(format!(
                    "{}: engine {name}, restarted after {} ms",
                    kind.label(),
                    gap.as_millis()
                ));
                self.retire_member(target);
                self.wait(gap)?;
                self.start_member(target)?;
            }
            Fault::EnginePause => {
                let d = Self::within(&PAUSE_MS, fraction);
                let until = Instant::now() + d;
                let member = &mut self.members[target];
                let extended = member.paused_until.is_some();
                member.paused_until = Some(member.paused_until.map_or(until, |u| u.max(until)));
                if let Some(p) = &member.process {
                    p.pause();
                }
                self.note_fault(format!(
                    "{}: engine {name} frozen {} ms{}",
                    kind.label(),
                    d.as_millis(),
                    if extended {
                        " (already frozen: extended)"
                    } else {
                        ""
                    }
                ));
            }
            Fault::IggyCut => {
                let d = Self::within(&CUT_MS, fraction);
                let until = Instant::now() + d;
                let extended = self.cut_until.is_some();
                self.cut_until = Some(self.cut_until.map_or(until, |u| u.max(until)));
                self.world.cut.black_hole(true);
                self.note_fault(format!(
                    "{}: engine A cut off from Iggy {} ms{}",
                    kind.label(),
                    d.as_millis(),
                    if extended {
                        " (already cut: extended)"
                    } else {
                        ""
                    }
                ));
            }
            Fault::IggyKill => {
                let settle = Self::within(&(300..1500), fraction);
                self.note_fault(format!(
                    "{}: the restored group members cleared {} ms after the restart",
                    kind.label(),
                    settle.as_millis()
                ));
                hold.store(true, Ordering::SeqCst);
                // The producer's batch in flight finishes (and is flushed) first.
                self.wait(Duration::from_millis(300))?;
                self.admin = None;
                let restarted = match &mut self.world.iggy {
                    IggyKind::Single(p) => p.kill_and_restart(),
                    IggyKind::Cluster(c) => c.restart_all(),
                };
                hold.store(false, Ordering::SeqCst);
                restarted.map_err(|e| format!("restarting Iggy: {e}"))?;
                // The engines reconnect and join again meanwhile.
                self.wait(settle)?;
                self.clear_restored_members()?;
            }
            Fault::IggyLeaderKill => self.kill_leader(fraction)?,
            Fault::S3Kill => {
                let gap = Self::within(&(200..1500), fraction);
                self.note_fault(format!("{}: down {} ms", kind.label(), gap.as_millis()));
                self.world.s3.stop().map_err(|e| format!("s3s-fs: {e}"))?;
                self.wait(gap)?;
                self.world
                    .s3
                    .start_again()
                    .map_err(|e| format!("s3s-fs: {e}"))?;
            }
            Fault::MosquittoRestart => {
                let gap = Self::within(&(100..1000), fraction);
                self.note_fault(format!("{}: down {} ms", kind.label(), gap.as_millis()));
                self.world
                    .broker
                    .stop_graceful(Duration::from_secs(5))
                    .map_err(|e| format!("mosquitto: {e}"))?;
                self.wait(gap)?;
                self.world
                    .broker
                    .start_again()
                    .map_err(|e| format!("mosquitto: {e}"))?;
            }
            Fault::MqttDrop => {
                self.note_fault(kind.label().to_owned());
                self.world.mqtt.close_all();
            }
            Fault::MqttBlackHole => {
                self.note_fault(kind.label().to_owned());
                self.world.mqtt.black_hole(true);
                let waited = self.wait(Duration::from_secs(1));
                self.world.mqtt.black_hole(false);
                waited?;
            }
            Fault::S3Stall => {
                self.note_fault(kind.label().to_owned());
                let plan = FaultPlan::seeded(sub_seed).stall(0.3, Duration::from_secs(3));
                self.s3_plan_for(plan, Duration::from_secs(2))?;
            }
            Fault::S3Faults => {
                self.note_fault(kind.label().to_owned());
                let plan = FaultPlan::seeded(sub_seed)
                    .drop_mid_body(0.1)
                    .status_500(0.1)
                    .slow_down_503(0.1);
                self.s3_plan_for(plan, Duration::from_secs(2))?;
            }
        }
        Ok(())
    }

    /// On a cluster: SIGKILLs the node that leads, waits for another to lead, keeps the killed
    /// one down 0.5-3 s more, starts it again and waits until it is in step (it holds what the
    /// leader holds), so that the next kill leaves a quorum. The producer and the engines go on
    /// throughout; they follow the new leader by themselves.
    pub(super) fn kill_leader(&mut self, fraction: f64) -> Result<(), String> {
        let down = Self::within(&(500..3000), fraction);
        let stream = self.world.stream.clone();
        let IggyKind::Cluster(cluster) = &mut self.world.iggy else {
            return Ok(());
        };
        let leader = cluster
            .wait_for_leader(LEADER_TIMEOUT)
            .map_err(|e| format!("the cluster before a leader kill: {e}"))?;
        let killed = Instant::now();
        cluster.kill(leader).map_err(|e| e.to_string())?;
        let next = cluster
            .wait_for_new_leader(leader, LEADER_TIMEOUT)
            .map_err(|e| format!("after killing leader node {leader}: {e}"))?;
        let elected = killed.elapsed();
        self.admin = None;
        self.note_fault(format!(
            "{}: node {leader} killed, node {next} led after {} ms; back after {} ms more",
            Fault::IggyLeaderKill.label(),
            elected.as_millis(),
            down.as_millis()
        ));
        self.wait(down)?;
        let IggyKind::Cluster(cluster) = &mut self.world.iggy else {
            return Ok(());
        };
        cluster.restart(leader).map_err(|e| e.to_string())?;
        cluster
            .wait_in_step(leader, &stream, TOPIC, Duration::from_secs(20))
            .map_err(|e| format!("node {leader} after its restart: {e}"))?;
        Ok(())
    }

    /// After an Iggy restart: the server restores each group's members from before it (their
    /// sessions gone), never evicts them, and keeps dealing partitions to them, so those
    /// partitions are never read again (Iggy 0.9.0-edge.5, after SIGKILL and SIGTERM alike).
    /// Not the engine's contract: the campaign clears them. With both engines frozen (SIGSTOP,
    /// so that neither stores an offset or joins meanwhile), it reads each group's stored
    /// offsets, deletes and re-creates the group, joins it as its only member, stores the
    /// offsets back, leaves, and thaws the engines (a paused one stays paused until its time);
    /// they find they are no longer members and join again.
    pub(super) fn clear_restored_members(&mut self) -> Result<(), String> {
        let frozen: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].paused_until.is_none())
            .collect();
        for &i in &frozen {
            if let Some(p) = &self.members[i].process {
                p.pause();
            }
        }
        // Requests the engines had sent reach the server first.
        std::thread::sleep(Duration::from_millis(200));
        let result = self.recreate_groups();
        for &i in &frozen {
            if let Some(p) = &self.members[i].process {
                p.resume();
            }
        }
        result
    }

    pub(super) fn recreate_groups(&mut self) -> Result<(), String> {
        let stream = self.world.stream.clone();
        let mut admin = reconnect(&self.addr)?;
        for group in [MQTT_SINK, S3_SINK] {
            let consumer = TestConsumer::Group(group.to_owned());
            let e = |what: &str, e: spillway_tests::HarnessError| {
                format!("clearing the group {group} after the Iggy restart: {what}: {e}")
            };
            let stored = (0..PARTITIONS)
                .map(|p| admin.stored_offset(&consumer, &stream, TOPIC, p))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|x| e("reading its offsets", x))?;
            admin
                .delete_consumer_group(&stream, TOPIC, group)
                .map_err(|x| e("deleting it", x))?;
            admin
                .create_consumer_group(&stream, TOPIC, group)
                .map_err(|x| e("creating it", x))?;
            admin
                .join_group(&stream, TOPIC, group)
                .map_err(|x| e("joining it", x))?;
            let assigned = admin
                .sync_group(&stream, TOPIC, group)
                .map_err(|x| e("reading the assignment", x))?;
            if assigned.as_ref().map(|(_, parts)| parts.len()) != Some(PARTITIONS as usize) {
                return Err(format!(
                    "clearing the group {group} after the Iggy restart: its only member was \
                     assigned {assigned:?}, not every partition"
                ));
            }
            for (p, offset) in (0..PARTITIONS).zip(&stored) {
                if let Some(offset) = offset {
                    admin
                        .store_offset(&consumer, &stream, TOPIC, p, *offset)
                        .map_err(|x| e("storing its offsets back", x))?;
                }
            }
            admin
                .leave_group(&stream, TOPIC, group)
                .map_err(|x| e("leaving it", x))?;
        }
        Ok(())
    }

    pub(super) fn s3_plan_for(&mut self, plan: FaultPlan, d: Duration) -> Result<(), String> {
        self.world.store.set_plan(plan).map_err(|e| e.to_string())?;
        let waited = self.wait(d);
        self.world
            .store
            .set_plan(FaultPlan::passthrough())
            .map_err(|e| e.to_string())?;
        waited
    }

    /// Waits `d`, doing the periodic work meanwhile.
    pub(super) fn wait(&mut self, d: Duration) -> Result<(), String> {
        let until = Instant::now() + d;
        loop {
            self.tick()?;
            let now = Instant::now();
            if now >= until {
                return Ok(());
            }
            std::thread::sleep((until - now).min(Duration::from_millis(20)));
        }
    }

    /// The periodic work: the broker's acknowledgements, the stored-offset checks, thawing
    /// paused engines and restoring the cut when due, and engines that exited by themselves.
    pub(super) fn tick(&mut self) -> Result<(), String> {
        collect_acks(&self.world.mqtt, &mut self.acked);
        let now = Instant::now();
        for m in &mut self.members {
            if m.paused_until.is_some_and(|u| u <= now) {
                m.paused_until = None;
                if let Some(p) = &m.process {
                    p.resume();
                }
            }
        }
        if self.cut_until.is_some_and(|u| u <= now) {
            self.cut_until = None;
            self.world.cut.black_hole(false);
        }
        if now >= self.next_check {
            self.next_check = now + Duration::from_millis(100);
            self.check_mqtt_stored();
            self.check_exits()?;
        }
        if now >= self.next_s3_check {
            self.next_s3_check = now + Duration::from_secs(1);
            self.check_s3_stored();
        }
        Ok(())
    }

    pub(super) fn start_member(&mut self, i: usize) -> Result<(), String> {
        let name = self.members[i].name;
        let config = self.world.engine_config(name);
        let password = self.world.iggy_at().password;
        let process = EngineProcess::start(
            &self.world.binary,
            &config,
            &[
                (spillway::config::ENV_IGGY_PASSWORD, password.as_str()),
                ("NO_COLOR", "1"),
            ],
        )?;
        let m = &mut self.members[i];
        m.runs += 1;
        m.paused_until = None;
        m.process = Some(process);
        Ok(())
    }

    /// SIGKILLs engine `i` (frozen or not) and keeps its log.
    pub(super) fn retire_member(&mut self, i: usize) {
        let m = &mut self.members[i];
        m.paused_until = None;
        if let Some(mut p) = m.process.take() {
            p.kill();
            let (name, run) = (m.name, m.runs);
            self.keep_log(name, run, &p.log());
        }
    }

    /// Writes an engine's log beside the others and counts what it shows.
    pub(super) fn keep_log(&mut self, name: &str, run: u32, log: &str) {
        let path = self.world.logs.join(format!("engine-{name}-{run}.log"));
        let _ = std::fs::write(&path, log);
        for line in log.lines() {
            if line.contains("consumer group assignment") {
                self.outcome.assignments += 1;
            }
            if line.contains("is owned by another member in the store") {
                self.outcome.fenced += 1;
            }
        }
    }

    /// Kills every engine still running (keeping their logs) and writes the Iggy server's log
    /// and the timeline.
    pub(super) fn save_logs(&mut self) {
        for i in 0..self.members.len() {
            self.retire_member(i);
        }
        let iggy_log = match &self.world.iggy {
            IggyKind::Single(p) => p.log(),
            IggyKind::Cluster(c) => c.logs(),
        };
        let _ = std::fs::write(self.world.logs.join("iggy.log"), iggy_log);
        let _ = std::fs::write(
            self.world.logs.join("timeline.txt"),
            self.outcome.timeline.join("\n") + "\n",
        );
        dump_store(&self.world.s3, &self.world.logs);
    }

    /// Waits until both engines logged a group assignment for both sinks.
    pub(super) fn await_assignments(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.tick()?;
            let ready = self.members.iter().all(|m| {
                m.process
                    .as_ref()
                    .is_some_and(|p| p.log().matches("consumer group assignment").count() >= 2)
            });
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                let tails = self.log_tails(20);
                return Err(format!(
                    "the engines got no group assignment within 30 s:\n{tails}"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// An engine that exited by itself is a problem: noted (with its log), and started again
    /// so that the campaign goes on.
    pub(super) fn check_exits(&mut self) -> Result<(), String> {
        for i in 0..self.members.len() {
            let Some(p) = self.members[i].process.as_mut() else {
                continue;
            };
            let how = match p.try_exit() {
                Ok(None) => continue,
                Ok(Some(_)) => "exited 0 by itself".to_owned(),
                Err(e) => e,
            };
            let name = self.members[i].name;
            let at = self.started.elapsed().as_secs_f64();
            let line = format!("{at:>5.1}s  engine {name} exited by itself: {how}");
            self.outcome.timeline.push(line.clone());
            self.outcome.engine_problems.push(line);
            self.retire_member(i);
            self.start_member(i)?;
        }
        Ok(())
    }

    /// The admin connection, connected again if it was lost.
    pub(super) fn admin(&mut self) -> Option<&mut IggyAdmin> {
        if self.admin.is_none() {
            self.admin = self.addr.connect().ok();
        }
        self.admin.as_mut()
    }
}
