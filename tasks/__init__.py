"""Pipeline stages: pure functions first; the thin Prefect layer lives in flows/."""
