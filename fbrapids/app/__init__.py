"""The application: the command line (``fbrapids``), the demo (one process and distributed),
the end-to-end pipeline, feature trials and the demo's serving export.  The top floor: it
imports every layer below and nothing imports it."""
