// exportStore (see exporter.h).
#include "dynamo/gui/exporter.h"

#include <QBuffer>
#include <QImage>
#include <QPainter>

#include <cstdio>
#include <map>

#include "dynamo/gui/compile_artifacts.h"
#include "dynamo/gui/graph_scene.h"
#include "dynamo/gui/overlays.h"
#include "dynamo/gui/store_session.h"
#include "dynamo/gui/svg_writer.h"
#include "dynamo/explain/trace_report.h"

namespace dynamo::gui {
namespace {

constexpr int kMaxPngSide = 6000;

std::string renderPng(InspectGraphPtr graph, std::shared_ptr<const VisibleGraph> visible,
                      std::shared_ptr<const LayoutResult> layout, Overlay overlay) {
  GraphScene scene;
  scene.setContent(graph, visible, layout, overlay);
  const QRectF src = scene.sceneRect();
  const double s = std::min(1.5, kMaxPngSide / std::max(src.width(), src.height()));
  QImage img(std::max(1, static_cast<int>(src.width() * s)), std::max(1, static_cast<int>(src.height() * s)),
             QImage::Format_RGB32);
  img.fill(Qt::white);
  {
    QPainter p(&img);
    p.setRenderHint(QPainter::Antialiasing);
    p.setRenderHint(QPainter::TextAntialiasing);
    scene.render(&p, QRectF(0, 0, img.width(), img.height()), src);
  }
  QByteArray bytes;
  QBuffer buf(&bytes);
  buf.open(QIODevice::WriteOnly);
  img.save(&buf, "PNG");
  return bytes.toStdString();
}

/// Every module group open (chunks stay closed): the fully expanded view when it fits.
std::set<int> allModules(const InspectGraph& g) {
  std::set<int> out;
  for (const InspectGroup& gr : g.groups())
    if (gr.id != 0) out.insert(gr.id);
  return out;
}

/// The graphs of a compile to export: Dynamo's (index, "-g0"), then its AOT graphs
/// (index < 0, "-aot-joint", "-aot2-forward", ...).
std::vector<std::pair<int, std::string>> graphsOf(const storage::TraceReader& reader, storage::RowId compile) {
  std::vector<std::pair<int, std::string>> out;
  for (const storage::GraphRecord& rec : reader.graphs(compile)) out.emplace_back(rec.index, "-g" + std::to_string(rec.index));
  for (const AotRecord& r : aotRecords(reader.artifactsOfCompile(compile)))
    for (const AotGraphRef& g : r.graphs)
      out.emplace_back(g.index, "-aot" + (r.ordinal > 0 ? std::to_string(r.ordinal + 1) : std::string()) + "-" +
                                    std::string(aotGraphKindName(g.kind)));
  return out;
}

/// The kernels of a graph as files (kernels/<graph>-<kernel>.cpp) and the summary's lines for
/// them: each kernel, its cache state or compile time, its run time, and the nodes it computes.
std::string kernelFiles(const InspectGraph& g, const std::string& base, const std::string& title,
                        std::vector<ExportFile>& files) {
  if (g.kernels().empty()) return {};
  std::string lines = "  " + title + ": " + std::to_string(g.kernels().size()) + " generated kernel(s)\n";
  for (const InspectKernel& k : g.kernels()) {
    const std::string file = "kernels/" + base + "-" + fileSafe(k.name) + (k.language == "cuda" ? ".cu" : ".cpp");
    files.push_back({file, k.source});
    char time[64];
    std::snprintf(time, sizeof time, "compiled in %.0f ms", k.compileMs);
    lines += "    " + file + ": " + k.name + " (" + k.loops + ", " + (k.cacheHit ? "cache hit" : time) + ", " +
             kernelRunText(k.runUs, k.runCalls) + "), nodes:";
    for (int n : k.nodes) lines += " " + g.node(n).name;
    lines += "\n";
  }
  return lines;
}

}  // namespace

std::string fileSafe(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.') out += c;
    else if (!out.empty() && out.back() != '_') out += '_';
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out.empty() ? "graph" : out;
}

ExportOutput exportStore(const std::string& path, const QString& layoutProgram, LayoutCache* cache) {
  auto reader = storage::TraceReader::open(path);
  ExportOutput out;
  std::string summary = explain::renderSummary(*reader) + "\n" + explain::renderGraphBreaks(*reader) + "\n" +
                        explain::renderCompiles(*reader) + "\n" + explain::renderGuardFailures(*reader);
  std::string index = "\ngraphs exported:\n";
  const std::vector<storage::RunRecord> runs = reader->runs();
  std::map<std::string, int> usedNames;
  for (const storage::RunRecord& run : runs) {
    std::map<storage::RowId, std::string> names;
    for (const storage::FrameRecord& f : reader->frames(run.id)) names[f.id] = f.name;
    for (const storage::CompileRecord& c : reader->compilesOfRun(run.id)) {
      for (const auto& [graphIndex, suffix] : graphsOf(*reader, c.id)) {
        std::string base = (runs.size() > 1 ? "run" + std::to_string(run.id) + "-" : std::string()) +
                           fileSafe(names[c.frameId]) + "-c" + std::to_string(c.attempt) + suffix;
        if (int n = usedNames[base]++; n > 0) base += "-" + std::to_string(n + 1);  // resume functions
        const std::string title = names[c.frameId] + " compile #" + std::to_string(c.attempt) + " " +
                                  graphIndexLabel(graphIndex);
        GraphLoad load = loadGraph(path, c.id, graphIndex);
        if (!load.graph) {
          out.notes.push_back(title + ": " + load.error.toStdString());
          continue;
        }
        // Coloured as the window opens them: by fusion group when kernels were generated for the
        // graph, AOT graphs by their partition, else by op kind.
        const Overlay overlay = defaultOverlay(*load.graph, graphIndex);
        index += kernelFiles(*load.graph, base, title, out.files);
        struct View {
          std::string suffix;
          std::set<int> expanded;
        };
        std::vector<View> views = {{"", {}}};
        const std::set<int> all = allModules(*load.graph);
        if (!all.empty()) {
          const size_t units = computeVisible(*load.graph, all).units.size();
          if (units <= static_cast<size_t>(kMaxLayoutUnits)) views.push_back({"-expanded", all});
          else out.notes.push_back(title + ": " + std::to_string(load.graph->nodes().size()) +
                                   " nodes; the expanded view would lay out " + std::to_string(units) +
                                   " boxes (limit " + std::to_string(kMaxLayoutUnits) + "): top-level view only");
        }
        for (const View& v : views) {
          auto visible = std::make_shared<VisibleGraph>(computeVisible(*load.graph, v.expanded));
          auto layout = std::make_shared<LayoutResult>();
          QString error;
          if (!LayoutEngine::layoutBlocking(layoutProgram, cache, toDot(*visible), *layout, error)) {
            out.notes.push_back(title + v.suffix + ": " + error.toStdString());
            continue;
          }
          out.files.push_back({"graphs/" + base + v.suffix + ".svg",
                               renderSvg(*load.graph, *visible, *layout, title, overlay)});
          out.files.push_back({"graphs/" + base + v.suffix + ".png", renderPng(load.graph, visible, layout, overlay)});
          index += "  graphs/" + base + v.suffix + ".{svg,png}: " + title + ", " +
                   std::to_string(load.graph->nodes().size()) + " nodes, " +
                   std::to_string(visible->units.size()) + " boxes\n";
        }
      }
    }
  }
  for (const std::string& n : out.notes) index += "  note: " + n + "\n";
  out.files.insert(out.files.begin(), ExportFile{"summary.txt", summary + index});
  return out;
}

}  // namespace dynamo::gui
