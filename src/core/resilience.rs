//! STUB with the agreed API; replaced by branch wt-cont.
use std::time::Duration;
pub const RESUME_PROMPT: &str =
    "上一轮在中途被打断,没有跑完。检查一下工作台里已经落盘的东西,从中断处接着做,不要重头来过。";
#[derive(Debug, Clone)]
pub struct Resilience {
    pub max_attempts: u32,
    pub base_delay: f64,
    pub max_delay: f64,
    pub probe_timeout: f64,
    pub probe_interval: f64,
    pub max_offline_wait: f64,
    pub retry_unknown: bool,
}
impl Default for Resilience {
    fn default() -> Self {
        Resilience {
            max_attempts: 6,
            base_delay: 4.0,
            max_delay: 120.0,
            probe_timeout: 5.0,
            probe_interval: 15.0,
            max_offline_wait: 3600.0,
            retry_unknown: true,
        }
    }
}
impl Resilience {
    pub fn from_env() -> (Resilience, Vec<String>) {
        (Resilience::default(), vec![])
    }
    pub fn delay(&self, _attempt: u32, _retry_after: Option<Duration>) -> Duration {
        Duration::ZERO
    }
    pub async fn wait_until_reachable(
        &self,
        _ep: &Endpoint,
        _on_wait: impl FnMut(Duration),
    ) -> bool {
        true
    }
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    Transient,
    Fatal,
    Unknown,
}
pub fn classify_error(_e: &crate::model::ModelError) -> ErrorClass {
    ErrorClass::Transient
}
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
}
pub fn endpoint_from(_b: &str) -> Endpoint {
    Endpoint {
        host: String::new(),
        port: 0,
    }
}
pub fn endpoint() -> Endpoint {
    Endpoint {
        host: String::new(),
        port: 0,
    }
}
pub async fn reachable(_host: &str, _port: u16, _timeout: Duration) -> bool {
    true
}
