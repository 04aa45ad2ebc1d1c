// SourceView: a user's source file with one line highlighted and scrolled to, under a header
// naming the file and line. When the file is not on this machine (another machine's path, a
// string compiled with exec), it shows the line the trace store kept, and says so.
#pragma once

#include <QLabel>
#include <QPlainTextEdit>
#include <QWidget>

#include "dynamo/common/error.h"

namespace dynamo::gui {

class SourceView : public QWidget {
  Q_OBJECT
 public:
  explicit SourceView(QWidget* parent = nullptr);

  /// Shows `where` (file, line, and the stored text of the line).
  void showLocation(const SourceLocation& where);
  /// Shows `text` (generated code, not a file) under `header`, line `line` (1-based)
  /// highlighted and scrolled to; 0: none.
  void showText(const QString& header, const QString& text, int line);
  /// Empties the view, with a note.
  void clearLocation(const QString& note = {});

  /// The header text ("resnet.py:92 (/usr/lib/.../resnet.py)").
  QString header() const { return header_->text(); }
  /// The highlighted line (1-based), 0 when none.
  int highlightedLine() const { return line_; }
  /// The text of the highlighted line as shown.
  QString highlightedText() const;
  /// True when the file itself was read (not only the stored line).
  bool showsFile() const { return showsFile_; }
  QPlainTextEdit* editor() const { return text_; }

 private:
  QLabel* header_;
  QPlainTextEdit* text_;
  QString loadedFile_;
  int line_ = 0;
  bool showsFile_ = false;
  bool showsText_ = false;  ///< showText: the line numbers are the text's own
};

}  // namespace dynamo::gui
