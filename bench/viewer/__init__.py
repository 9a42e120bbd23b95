"""The run's page, `reports/run.html`, to read a run question by question: `data` (what the page
shows, from the run's records), `page` (the HTML, with page.css and page.js of this package
inline). `python -m stages.viewer [--out PATH]` writes it; the report stage writes it too."""
