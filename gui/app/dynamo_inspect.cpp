// dynamo-inspect: the desktop inspector of a trace store (gui/, docs/inspector.md).
//
//   dynamo-inspect [trace.db]              the window (a file dialog without an argument)
//   dynamo-inspect --export DIR trace.db   SVG/PNG of every graph and summary.txt, no display
//
// A thin main over dynamo::gui: argument parsing and, for --export, writing the files.
#include <QApplication>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "dynamo/gui/exporter.h"
#include "dynamo/gui/main_window.h"
#include "dynamo/gui/store_session.h"

namespace {

constexpr const char* kUsage =
    "usage: dynamo-inspect [trace.db]\n"
    "       dynamo-inspect --export DIR trace.db\n"
    "\n"
    "The desktop inspector of a Dynamo trace store: runs, the code that compiled, compiles,\n"
    "graphs (Graphviz layout), graph breaks, recompiles and graph diffs. --export writes every\n"
    "graph as SVG and PNG and a summary.txt into DIR without a display.\n";

int fail(const std::string& message, int code = 1) {
  std::cerr << "dynamo-inspect: " << message << "\n";
  return code;
}

int runExport(const QString& dir, const QString& store) {
  using namespace dynamo::gui;
  const QString storeAbs = QFileInfo(store).absoluteFilePath();
  dynamo::gui::ExportOutput out;
  try {
    LayoutCache cache;
    out = exportStore(store.toStdString(), LayoutEngine::locateLayoutProgram(), &cache);
  } catch (const std::exception& e) {
    return fail(describeError(e).toStdString());
  }
  for (const ExportFile& f : out.files) {
    const QString target = QDir(dir).filePath(QString::fromStdString(f.name));
    if (QFileInfo(target).absoluteFilePath() == storeAbs)
      return fail("refusing to overwrite the trace store '" + store.toStdString() + "': pick another DIR");
    if (!QDir().mkpath(QFileInfo(target).absolutePath()))
      return fail("cannot create directory '" + QFileInfo(target).absolutePath().toStdString() + "'");
    QFile file(target);
    if (!file.open(QIODevice::WriteOnly) ||
        file.write(f.data.data(), static_cast<qint64>(f.data.size())) != static_cast<qint64>(f.data.size()))
      return fail("cannot write '" + target.toStdString() + "': " + file.errorString().toStdString());
  }
  for (const std::string& n : out.notes) std::cerr << "dynamo-inspect: note: " << n << "\n";
  std::cout << "wrote " << out.files.size() << " files to " << dir.toStdString() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  QString exportDir, store;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--export") {
      if (i + 1 >= argc) return fail("--export needs a directory\n" + std::string(kUsage), 2);
      exportDir = QString::fromLocal8Bit(argv[++i]);
    } else if (!a.empty() && a[0] == '-') {
      return fail("unknown option '" + a + "'\n" + kUsage, 2);
    } else if (store.isEmpty()) {
      store = QString::fromLocal8Bit(argv[i]);
    } else {
      return fail("one trace store at a time\n" + std::string(kUsage), 2);
    }
  }
  if (!exportDir.isEmpty()) {
    if (store.isEmpty()) return fail("--export needs a trace store\n" + std::string(kUsage), 2);
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
    QApplication app(argc, argv);
    return runExport(exportDir, store);
  }
  QApplication app(argc, argv);
  QApplication::setApplicationName("dynamo-inspect");
  dynamo::gui::MainWindow window;
  window.show();
  if (store.isEmpty())
    store = QFileDialog::getOpenFileName(&window, "Open a Dynamo trace store", QString(),
                                         "Trace stores (*.db);;All files (*)");
  if (!store.isEmpty()) window.openStore(store);
  return app.exec();
}
