// `dynamo-inspect --export DIR trace.db`: every graph of the store drawn as SVG and PNG (its
// top-level view, and fully expanded when that fits the layout limit; Dynamo's graphs by op
// kind, AOT joint / forward / backward graphs by their partition), and a plain-text
// summary, without a display (CI artifacts). Returns the files as (name, bytes) pairs; only the
// thin main writes them (house style: reports never touch the disk).
#pragma once

#include <QString>

#include <string>
#include <vector>

#include "dynamo/gui/layout_engine.h"

namespace dynamo::gui {

/// One file to write under the export directory.
struct ExportFile {
  std::string name;  ///< "summary.txt", "graphs/forward-c0-g0.svg", "graphs/forward-c0-aot-joint.png"
  std::string data;  ///< bytes
};

/// What an export produced.
struct ExportOutput {
  std::vector<ExportFile> files;    ///< summary.txt first
  std::vector<std::string> notes;   ///< graphs that could not be drawn in full, and why
};

/// Exports the store at `path`. Needs a QGuiApplication (offscreen is fine) for the PNGs.
/// Throws UserError(kTraceStore) when the store cannot be read.
ExportOutput exportStore(const std::string& path, const QString& layoutProgram, LayoutCache* cache);

/// "<resume in f>" -> "resume_in_f": a name safe in a file name.
std::string fileSafe(const std::string& name);

}  // namespace dynamo::gui
