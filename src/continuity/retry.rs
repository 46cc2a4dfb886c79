//! The one retry decision, for a step's main session and for its sub-agents alike:
//! classify the error, wait out an outage (the model's API or the store's database),
//! back off, say so ([`Event::Retrying`]). The runtime retries a step by resuming its
//! session; a sub-agent is retried by the engine through [`SubagentRecovery`], which
//! resumes the sub-agent's own session and counts the retry in the step's row.

use super::manifest::{Outage, StepError, StepResult};
use super::resilience::{self, Endpoint, ErrorClass, Resilience};
use crate::engine::{EngineError, Event, EventSink, Recovery};
use crate::future::BoxFuture;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What to do after a failed run.
pub(super) enum Verdict {
    /// Waited (the outage it names, if any; the backoff): go again.
    Retry(Option<Outage>),
    /// Retrying cannot help or the attempts are spent; the hint says what the user has
    /// to fix, for a fatal error that has one.
    Stop(Option<String>),
    /// The endpoint stayed away longer than `max_offline_wait`.
    GaveUp,
}

/// The retry policy with what it probes and whom it tells.
pub(super) struct Retrier {
    pub(super) resilience: Resilience,
    pub(super) events: EventSink,
    /// The model's API, for the probe; `None` when the client has none.
    pub(super) model: Option<Endpoint>,
    /// The store's database; `None` for a local store.
    pub(super) store: Option<Endpoint>,
    /// Outages waited out and not yet folded into the attempt's row.
    pub(super) outages: Mutex<Vec<Outage>>,
    /// Ctrl-C once: an outage wait stops and the session is tried again at once; the
    /// interrupt stays pending, so the engine then asks the person for a line as after
    /// any interrupted reply (and a second Ctrl-C exits).
    pub(super) interrupt: crate::engine::Interrupt,
    /// Every request of the run waits while it holds: set for a `retry-after` and
    /// while an outage lasts, so that the run waits once, not once per agent.
    pub(super) pause: crate::engine::Pause,
    /// One outage wait at a time: a request that fails while another waits joins it.
    pub(super) outage_wait: tokio::sync::Mutex<()>,
    /// Outage waits finished so far (a request that joined one sees the count move).
    pub(super) outages_waited: std::sync::atomic::AtomicU64,
}

/// How [`Retrier::wait_for`] went.
enum Waited {
    /// The endpoint answered: no outage.
    No,
    /// This request waited the outage out (and told the person).
    Own,
    /// Another request of the run waited it out meanwhile.
    Joined,
}

impl Retrier {
    /// Try number `number` failed with `error`: whether (having waited) to go again.
    /// `depth` is the agent's (0 for the step's main session).
    pub(super) async fn after(&self, error: &EngineError, number: u32, depth: u32) -> Verdict {
        let model_error = error.model_error();
        let store_away = error.store_error().is_some_and(|e| e.is_transient());
        let class = match model_error {
            Some(model_error) => resilience::classify_error(model_error),
            // The database went away: like the network, it is waited for.
            None if store_away => ErrorClass::Transient,
            None => ErrorClass::Fatal,
        };
        if !self.resilience.should_retry(class) || number >= self.resilience.max_attempts {
            let hint = match class {
                ErrorClass::Fatal => model_error.and_then(resilience::fatal_hint),
                _ => None,
            };
            return Verdict::Stop(hint.map(str::to_string));
        }
        let endpoint = if store_away { &self.store } else { &self.model };
        let started = std::time::Instant::now();
        let Some(waited) = self.wait_for(endpoint.as_ref(), store_away).await else {
            return Verdict::GaveUp;
        };
        if matches!(waited, Waited::Joined) && !self.interrupt.is_pending() {
            // The run already waited this outage out (and said so): go again at once.
            return Verdict::Retry(None);
        }
        let outage = matches!(waited, Waited::Own).then(|| Outage {
            waited_s: started.elapsed().as_secs_f64(),
            database: store_away,
        });
        super::guard::lock(&self.outages).extend(outage);
        let retry_after = model_error.and_then(|e| e.retry_after());
        // After an outage the wait was the backoff: the endpoint answers again, so
        // the retry goes out at once (while the prompt cache may still be warm).
        let delay = if matches!(waited, Waited::No) {
            self.resilience.delay(number, retry_after)
        } else {
            Duration::ZERO
        };
        if retry_after.is_some() {
            // The API said when: every request of the run waits until then.
            self.pause.until(std::time::Instant::now() + delay);
        }
        (self.events)(&Event::Retrying {
            attempt: number + 1,
            max_attempts: self.resilience.max_attempts,
            delay_s: delay.as_secs_f64(),
            error: error.to_string(),
            depth,
        });
        tokio::time::sleep(delay).await;
        Verdict::Retry(outage)
    }

    /// The outages waited out since the last call, oldest first.
    pub(super) fn take_outages(&self) -> Vec<Outage> {
        std::mem::take(&mut *super::guard::lock(&self.outages))
    }

    /// While the endpoint is unreachable, waits (probing) without spending attempts,
    /// holding every request of the run meanwhile. `None` when the wait limit passed.
    /// Requests that fail while one waits join its wait instead of starting their own.
    async fn wait_for(&self, endpoint: Option<&Endpoint>, database: bool) -> Option<Waited> {
        use std::sync::atomic::Ordering;
        let Some(endpoint) = endpoint else {
            return Some(Waited::No);
        };
        let seen = self.outages_waited.load(Ordering::SeqCst);
        let _one = self.outage_wait.lock().await;
        if self.outages_waited.load(Ordering::SeqCst) != seen {
            return Some(Waited::Joined);
        }
        let timeout = Duration::from_secs_f64(self.resilience.probe_timeout.max(0.01));
        if resilience::reachable(&endpoint.host, endpoint.port, timeout).await {
            return Some(Waited::No);
        }
        /// Lifts the pause however the wait ends (a dropped wait included).
        struct Offline<'a>(&'a crate::engine::Pause);
        impl Drop for Offline<'_> {
            fn drop(&mut self) {
                self.0.offline(false);
            }
        }
        self.pause.offline(true);
        let offline = Offline(&self.pause);
        let waited = self.wait_online(endpoint, database).await;
        drop(offline);
        self.outages_waited.fetch_add(1, Ordering::SeqCst);
        waited
    }

    /// [`Retrier::wait_for`] once the endpoint was found away.
    async fn wait_online(&self, endpoint: &Endpoint, database: bool) -> Option<Waited> {
        let shown = format!("{}:{}", endpoint.host, endpoint.port);
        let events = self.events.clone();
        let started = std::time::Instant::now();
        let online = tokio::select! {
            online = self.resilience.wait_until_reachable(endpoint, |waited| {
                events(&Event::Offline {
                    waited_s: waited.as_secs_f64(),
                    endpoint: shown.clone(),
                    database,
                })
            }) => online,
            () = self.interrupt.wait() => {
                (self.events)(&Event::OfflineWaitInterrupted {
                    waited_s: started.elapsed().as_secs_f64(),
                    database,
                });
                return Some(Waited::Own);
            }
        };
        if online {
            (self.events)(&Event::Online { database });
        }
        online.then_some(Waited::Own)
    }
}

/// A sub-agent's retries, by the step's policy; each one is counted in the in-flight
/// row (an error in `errors[]`, one more in `attempts`) so that a row rescued on a
/// signal has it too.
pub(super) struct SubagentRecovery {
    pub(super) retrier: Arc<Retrier>,
    pub(super) in_flight: Arc<Mutex<Option<StepResult>>>,
}

impl Recovery for SubagentRecovery {
    fn retry<'a>(
        &'a self,
        agent_id: &'a str,
        error: &'a EngineError,
        tries: u32,
    ) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            match self.retrier.after(error, tries, 1).await {
                Verdict::Retry(outage) => {
                    let mut in_flight = super::guard::lock(&self.in_flight);
                    if let Some(row) = in_flight.as_mut() {
                        let text = crate::engine::recovery::retried_text(agent_id, error);
                        row.errors.push(StepError::new(text, error.kind()));
                        row.attempts += 1;
                        // A row rescued meanwhile has the outage too; the attempt takes
                        // it from the retrier when the run ends.
                        row.outages.extend(outage);
                    }
                    true
                }
                Verdict::Stop(_) | Verdict::GaveUp => false,
            }
        })
    }
}
