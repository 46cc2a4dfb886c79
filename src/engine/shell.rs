//! Splitting a shell command line into the simple commands it runs. TODO (issue #2)
