"""The run's page (`LAYOUT.report.page`), to read a run question by question: `data` (what the
page shows, from the run's records: `PageInputs`), `page` (the HTML, with page.css and page.js of
this package inline; `render_run_page` is the entry). `python -m commands.viewer [--out PATH]`
writes it; the report stage writes it too."""
