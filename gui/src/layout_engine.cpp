// LayoutCache and LayoutEngine (see layout_engine.h).
#include "dynamo/gui/layout_engine.h"

#include <algorithm>
#include <QCoreApplication>
#include <QCryptographicHash>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QSaveFile>
#include <QStandardPaths>

namespace dynamo::gui {
namespace {

/// Bumped when the layout output format or the DOT text's meaning changes.
constexpr const char* kLayoutFormat = "dynamo-inspect-layout/1\n";

}  // namespace

LayoutCache::LayoutCache(QString dir) : dir_(std::move(dir)) {}

QString LayoutCache::defaultDir() {
  const QByteArray env = qgetenv("DYNAMO_INSPECT_CACHE");
  if (!env.isEmpty()) return QString::fromLocal8Bit(env);
  QString base = QStandardPaths::writableLocation(QStandardPaths::GenericCacheLocation);
  if (base.isEmpty()) base = QDir::tempPath();
  return base + "/dynamo-inspect/layouts";
}

std::string LayoutCache::keyOf(const std::string& dot) {
  QCryptographicHash h(QCryptographicHash::Sha1);
  h.addData(QByteArrayView(kLayoutFormat));
  h.addData(QByteArrayView(dot.data(), static_cast<qsizetype>(dot.size())));
  return h.result().toHex().toStdString();
}

std::optional<std::string> LayoutCache::get(const std::string& key) const {
  if (dir_.isEmpty()) return std::nullopt;
  QFile f(dir_ + "/" + QString::fromStdString(key) + ".layout");
  if (!f.open(QIODevice::ReadOnly)) return std::nullopt;
  const QByteArray data = f.readAll();
  return data.toStdString();
}

bool LayoutCache::contains(const std::string& key) const {
  return !dir_.isEmpty() && QFileInfo::exists(dir_ + "/" + QString::fromStdString(key) + ".layout");
}

void LayoutCache::put(const std::string& key, const std::string& text) const {
  if (dir_.isEmpty() || !QDir().mkpath(dir_)) return;
  QSaveFile f(dir_ + "/" + QString::fromStdString(key) + ".layout");
  if (!f.open(QIODevice::WriteOnly)) return;
  f.write(text.data(), static_cast<qint64>(text.size()));
  f.commit();
}

LayoutEngine::LayoutEngine(QString program, std::shared_ptr<LayoutCache> cache, QObject* parent)
    : QObject(parent), program_(std::move(program)), cache_(std::move(cache)) {
  timeout_.setSingleShot(true);
  connect(&timeout_, &QTimer::timeout, this, &LayoutEngine::onTimeout);
}

LayoutEngine::~LayoutEngine() { stopProcess(); }

QString LayoutEngine::locateLayoutProgram() {
  const QByteArray env = qgetenv("DYNAMO_INSPECT_LAYOUT");
  if (!env.isEmpty()) return QString::fromLocal8Bit(env);
  if (QCoreApplication::instance()) {
    const QString beside = QCoreApplication::applicationDirPath() + "/dynamo-inspect-layout";
    if (QFileInfo(beside).isExecutable()) return beside;
  }
#ifdef DYNAMO_INSPECT_INSTALLED_LAYOUT
  if (QFileInfo(DYNAMO_INSPECT_INSTALLED_LAYOUT).isExecutable()) return DYNAMO_INSPECT_INSTALLED_LAYOUT;
#endif
  return "dynamo-inspect-layout";
}

bool LayoutEngine::busy() const { return running_ != 0; }

void LayoutEngine::stopProcess() {
  timeout_.stop();
  if (!process_) return;
  QProcess* p = process_;
  process_ = nullptr;
  p->disconnect(this);
  if (p->state() != QProcess::NotRunning) {
    p->kill();
    p->waitForFinished(1000);  // a killed process exits at once; reaps it
  }
  p->deleteLater();
}

void LayoutEngine::cancel() {
  if (!running_) return;
  const int t = running_;
  running_ = 0;
  stopProcess();
  emit canceled(t);
}

int LayoutEngine::request(const std::string& dot) {
  cancel();
  const int ticket = ++ticket_;
  const std::string key = LayoutCache::keyOf(dot);
  if (cache_) {
    if (std::optional<std::string> text = cache_->get(key)) {
      auto result = std::make_shared<LayoutResult>();
      std::string error;
      if (parseLayout(*text, *result, error)) {
        ++hits_;
        QMetaObject::invokeMethod(
            this, [this, ticket, result] { emit finished(ticket, result, true); },
            Qt::QueuedConnection);
        return ticket;
      }
    }
  }
  ++runs_;
  running_ = ticket;
  runningKey_ = key;
  process_ = new QProcess(this);
  process_->setProgram(program_);
  connect(process_, &QProcess::finished, this, &LayoutEngine::onProcessFinished);
  connect(process_, &QProcess::errorOccurred, this, [this, ticket](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart || running_ != ticket) return;
    running_ = 0;
    stopProcess();
    emit failed(ticket, QString("cannot start the layout program '%1': install dynamo-inspect-layout "
                                "beside dynamo-inspect or set DYNAMO_INSPECT_LAYOUT")
                            .arg(program_));
  });
  process_->start();
  process_->write(dot.data(), static_cast<qint64>(dot.size()));
  process_->closeWriteChannel();
  timeout_.start(timeoutMs_);
  return ticket;
}

void LayoutEngine::onProcessFinished(int exitCode, QProcess::ExitStatus status) {
  if (!process_ || !running_) return;
  const int ticket = running_;
  running_ = 0;
  timeout_.stop();
  const QByteArray out = process_->readAllStandardOutput();
  const QByteArray err = process_->readAllStandardError();
  process_->deleteLater();
  process_ = nullptr;
  if (status != QProcess::NormalExit || exitCode != 0) {
    emit failed(ticket, QString("the layout program failed (exit %1): %2")
                            .arg(exitCode).arg(QString::fromUtf8(err).trimmed()));
    return;
  }
  auto result = std::make_shared<LayoutResult>();
  std::string error;
  const std::string text = out.toStdString();
  if (!parseLayout(text, *result, error)) {
    emit failed(ticket, QString::fromStdString(error));
    return;
  }
  if (cache_) cache_->put(runningKey_, text);
  emit finished(ticket, result, false);
}

void LayoutEngine::onTimeout() {
  if (!running_) return;
  const int ticket = running_;
  running_ = 0;
  stopProcess();
  emit failed(ticket, QString("Graphviz took more than %1 s to lay this view out and was stopped: "
                              "collapse some modules")
                          .arg(timeoutMs_ / 1000));
}

bool LayoutEngine::layoutBlocking(const QString& program, LayoutCache* cache,
                                  const std::string& dot, LayoutResult& out, QString& error,
                                  int timeoutMs) {
  const std::string key = LayoutCache::keyOf(dot);
  std::string err;
  if (cache)
    if (std::optional<std::string> text = cache->get(key))
      if (parseLayout(*text, out, err)) return true;
  QProcess p;
  p.start(program, {});
  if (!p.waitForStarted(10000)) {
    error = QString("cannot start the layout program '%1'").arg(program);
    return false;
  }
  p.write(dot.data(), static_cast<qint64>(dot.size()));
  p.closeWriteChannel();
  if (!p.waitForFinished(timeoutMs)) {
    p.kill();
    p.waitForFinished(1000);
    error = QString("Graphviz took more than %1 s and was stopped").arg(timeoutMs / 1000);
    return false;
  }
  const std::string text = p.readAllStandardOutput().toStdString();
  if (p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0) {
    error = QString("the layout program failed: %1").arg(QString::fromUtf8(p.readAllStandardError()).trimmed());
    return false;
  }
  if (!parseLayout(text, out, err)) {
    error = QString::fromStdString(err);
    return false;
  }
  if (cache) cache->put(key, text);
  return true;
}

LayoutPrefetcher::LayoutPrefetcher(QString program, std::shared_ptr<LayoutCache> cache, QObject* parent)
    : QObject(parent), cache_(cache), engine_(new LayoutEngine(std::move(program), std::move(cache), this)) {
  connect(engine_, &LayoutEngine::finished, this, [this](int ticket, std::shared_ptr<const LayoutResult>, bool) {
    if (ticket != ticket_) return;
    ++done_;
    const std::string key = current_;
    current_.clear();
    emit ready(key);
    next();
  });
  connect(engine_, &LayoutEngine::failed, this, [this](int ticket, const QString&) {
    if (ticket != ticket_) return;
    const std::string key = current_;
    current_.clear();
    emit ready(key);  // not in the cache: a view waiting for it lays it out itself (and says why)
    next();
  });
}

void LayoutPrefetcher::prefetch(std::vector<std::string> dots) {
  queue_ = std::move(dots);
  std::reverse(queue_.begin(), queue_.end());  // popped from the back
  if (current_.empty()) next();
}

void LayoutPrefetcher::stop() {
  queue_.clear();
  current_.clear();
  ticket_ = 0;
  engine_->cancel();
}

void LayoutPrefetcher::next() {
  while (!queue_.empty()) {
    std::string dot = std::move(queue_.back());
    queue_.pop_back();
    const std::string key = LayoutCache::keyOf(dot);
    if (cache_ && cache_->get(key)) continue;
    current_ = key;
    ticket_ = engine_->request(dot);
    return;
  }
}

}  // namespace dynamo::gui
