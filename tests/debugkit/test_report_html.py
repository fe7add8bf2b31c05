"""run --report FILE.html: one self-contained page (inline SVG, no script, no network) whose per-layer chart marks
the first divergence; on the bundled FP16-overflow example (docs/PRECISION.md) that is the born-bad ReduceSum."""
import html.parser
import os
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "example.onnx")


class _Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = []   # (tag, attrs)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def find(self, tag, **want):
        return [a for t, a in self.tags if t == tag and all(a.get(k.replace("_", "-")) == v for k, v in want.items())]


def test_mark_all_report_marks_the_born_bad_node(cli, tmp_path):
    page = tmp_path / "report.html"
    code, out, err = cli("run", EXAMPLE, "--engine", "--onnxrt", "--fp16", "--mark-all", "--report", page)
    assert code == 1, out + err   # the FP16 engine overflows
    text = page.read_text()
    p = _Page()
    p.feed(text)
    [marker] = p.find("g", **{"class": "marker"})
    assert (marker["data-node"], marker["data-op-type"], marker["data-born-here"]) == ("reduce", "ReduceSum", "True")
    bars = [a["data-layer"] for a in p.find("rect", **{"class": "bar"})]
    assert bars[-1] == marker["data-layer"] == "y" and len(bars) == 3   # every tensor, in network order
    assert "first divergence: reduce (ReduceSum, born here)" in text
    # self-contained: no script, nothing fetched; every chart is well-formed SVG
    assert not p.find("script") and not [a for _, a in p.tags if "src" in a or "href" in a]
    for chunk in text.split("<svg")[1:]:
        ET.fromstring("<svg" + chunk.split("</svg>")[0] + "</svg>")
    assert "FAILED" in text and "<code>y</code>" in text


def test_report_has_an_error_histogram_per_output(cli, tmp_path, chain):
    page = tmp_path / "r.html"
    code, out, err = cli("run", chain, "--engine", "--onnxrt", "--report", page)
    assert code == 0, out + err
    p = _Page()
    p.feed(page.read_text())
    assert len(p.find("rect", **{"class": "bin"})) == 10


def test_report_folder_is_checked_before_any_work(cli, tmp_path):
    code, _, err = cli("run", EXAMPLE, "--onnxrt", "--report", tmp_path / "no" / "r.html")
    assert code == 2 and "does not exist" in err


def test_fused_region_divergence_hints_disable_fusion():
    from debugkit.compare.comparator import PairResult, RunSummary
    from debugkit.compare.divergence import Divergence
    from debugkit.compare.funcs import OutputResult
    from debugkit.report import render
    pr = PairResult("engine-runner", "onnxrt-runner", 0)
    pr.layers = {"t": OutputResult("t", False)}
    pr.divergence = Divergence("t", "relu", "Relu", True, ["conv", "relu"])
    text = render(RunSummary(pairs=[pr]))
    assert "--disable-fusion" in text and "2 ONNX nodes were fused" in text


def _browser():
    import shutil
    return next((shutil.which(b) for b in ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
                 if shutil.which(b)), None)


def test_report_opens_in_a_headless_browser(cli, tmp_path):
    import subprocess
    browser = _browser()
    if browser is None:
        import pytest
        pytest.skip("no headless browser installed (apt-get install chromium-headless-shell); the HTML is parsed above")
    page = tmp_path / "report.html"
    cli("run", EXAMPLE, "--engine", "--onnxrt", "--fp16", "--mark-all", "--report", page)
    p = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-500:]
    dom = _Page()
    dom.feed(p.stdout)   # the DOM the browser built from the page
    [marker] = dom.find("g", **{"class": "marker"})
    assert marker["data-node"] == "reduce" and len(dom.find("rect", **{"class": "bar"})) == 3
