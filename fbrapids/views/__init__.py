"""Raw log views: reading (parquet / CSV / JSON lines) and cleaning."""
