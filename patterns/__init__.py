"""The shipped failure-signature library: data only (one TOML file per signature), see README.md."""
