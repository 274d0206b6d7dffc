//! A message the broker or the session will not take: the sink's error policy decides
//! (fail, skip, or the dead-letter topic).

use super::*;

impl Ctx {
    pub(super) fn set_fatal(&self, e: EngineError) {
        let mut f = self.fatal.borrow_mut();
        if f.is_none() {
            *f = Some(e);
            self.changes.bump();
        }
    }

    /// A message the broker (or the session) will not take: the error policy decides.
    pub fn reject(&self, link: &Link, token: Token, reason: String, code: Option<ReasonCode>) {
        if token.status {
            warn!(
                sink = %self.sink,
                conn = link.index,
                "the birth message (sink.mqtt.birth) was not taken: {reason}"
            );
            return;
        }
        if token.dead_letter {
            self.acks.fail(
                token.slot,
                token.offset,
                format!("its dead letter was rejected too: {reason}"),
            );
            return;
        }
        if self.policy == ErrorPolicy::DeadLetter
            && let (Some(topic), Some(kept)) = (&self.dead_letter_topic, token.kept)
        {
            if let Some(more) = crate::ratelog::per_message(&self.dead_letter_log, Instant::now()) {
                warn!(
                    sink = %self.sink,
                    partition = kept.partition.partition.0,
                    offset = token.offset.0,
                    "sending a rejected message to the dead-letter topic: {reason}{more}"
                );
            }
            let publish = self.shaper.borrow().dead_letter(
                topic,
                &kept.partition,
                &kept.message,
                &reason,
                code,
            );
            link.queue.borrow_mut().push_front(Item {
                publish,
                token: Token {
                    slot: token.slot,
                    offset: token.offset,
                    kept: None,
                    dead_letter: true,
                    status: false,
                },
            });
            link.wake();
            return;
        }
        self.acks.fail(token.slot, token.offset, reason);
    }
}
