//! TODO (issue #4)
pub struct WakeState;
pub fn wake_state() {}
