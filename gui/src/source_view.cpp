// SourceView (see source_view.h).
#include "dynamo/gui/source_view.h"

#include <QFile>
#include <QFileInfo>
#include <QFontDatabase>
#include <QTextBlock>
#include <QVBoxLayout>

namespace dynamo::gui {
namespace {
constexpr qint64 kMaxSourceBytes = 8 << 20;
}

SourceView::SourceView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  header_ = new QLabel(this);
  header_->setObjectName("sourceHeader");
  header_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  header_->setWordWrap(true);
  text_ = new QPlainTextEdit(this);
  text_->setObjectName("sourceText");
  text_->setReadOnly(true);
  text_->setLineWrapMode(QPlainTextEdit::NoWrap);
  text_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  layout->addWidget(header_);
  layout->addWidget(text_, 1);
  clearLocation();
}

void SourceView::clearLocation(const QString& note) {
  header_->setText(note.isEmpty() ? QString("no source line selected") : note);
  text_->clear();
  text_->setExtraSelections({});
  loadedFile_.clear();
  line_ = 0;
  showsFile_ = false;
  showsText_ = false;
}

QString SourceView::highlightedText() const {
  if (line_ <= 0) return {};
  return text_->document()->findBlockByNumber(showsFile_ || showsText_ ? line_ - 1 : 0).text();
}

void SourceView::showText(const QString& header, const QString& text, int line) {
  header_->setText(header);
  if (loadedFile_ != "\x01text:" + header || text_->toPlainText() != text) text_->setPlainText(text);
  loadedFile_ = "\x01text:" + header;  // not a file: showLocation reads its file again
  showsFile_ = false;
  showsText_ = true;
  line_ = line;
  text_->setExtraSelections({});
  if (line <= 0) return;
  const QTextBlock block = text_->document()->findBlockByNumber(line - 1);
  QTextEdit::ExtraSelection sel;
  sel.format.setBackground(QColor("#fff3a0"));
  sel.format.setProperty(QTextFormat::FullWidthSelection, true);
  sel.cursor = QTextCursor(block);
  text_->setExtraSelections({sel});
  text_->setTextCursor(QTextCursor(block));
  text_->centerCursor();
}

void SourceView::showLocation(const SourceLocation& where) {
  if (!where.known()) {
    clearLocation("no source line recorded for this item");
    return;
  }
  const QString file = QString::fromStdString(where.file);
  const QFileInfo fi(file);
  const QString shortName = fi.fileName();
  bool ok = false;
  if (fi.isFile() && fi.size() <= kMaxSourceBytes) {
    if (loadedFile_ == fi.absoluteFilePath()) {
      ok = true;
    } else {
      QFile f(file);
      if (f.open(QIODevice::ReadOnly)) {
        text_->setPlainText(QString::fromUtf8(f.readAll()));
        loadedFile_ = fi.absoluteFilePath();
        ok = true;
      }
    }
  }
  showsText_ = false;
  showsFile_ = ok && where.line > 0 && where.line <= text_->document()->blockCount();
  line_ = where.line;
  if (!showsFile_) {
    loadedFile_.clear();
    text_->setPlainText(QString::fromStdString(where.sourceLine));
    header_->setText(QString("%1:%2 (%3 is not readable here: showing the line stored in the trace)")
                         .arg(shortName).arg(where.line).arg(file));
  } else {
    header_->setText(QString("%1:%2 (%3)").arg(shortName).arg(where.line).arg(fi.absoluteFilePath()));
  }
  const QTextBlock block = text_->document()->findBlockByNumber(showsFile_ ? where.line - 1 : 0);
  QTextEdit::ExtraSelection sel;
  sel.format.setBackground(QColor("#fff3a0"));
  sel.format.setProperty(QTextFormat::FullWidthSelection, true);
  sel.cursor = QTextCursor(block);
  text_->setExtraSelections({sel});
  text_->setTextCursor(QTextCursor(block));
  text_->centerCursor();
}

}  // namespace dynamo::gui
