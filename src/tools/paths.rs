//! Workspace path confinement. TODO
