// End to end, under Xvfb (xvfb-run), with QTest: the inspector's window on the demo's store
// (dynamo-demo: resnet18 and scale_if_large with a graph break and a recompile). Each step is
// checked on the widget tree and leaves a screenshot in $DYNAMO_E2E_SHOTS:
//   open the store, select resnet18's graph, expand a module, search a node, open its source
//   line, open a break (and the graph after it), open a recompile, diff two compiles.
#include <QApplication>
#include <QDir>
#include <QHeaderView>
#include <QSignalSpy>
#include <QTest>

#include "dynamo/gui/main_window.h"

using namespace dynamo::gui;

class InspectorE2E : public QObject {
  Q_OBJECT

 private:
  MainWindow* w_ = nullptr;
  QString shots_;

  void shot(const QString& name) {
    QApplication::processEvents();
    QVERIFY(w_->grab().save(shots_ + "/" + name + ".png"));
  }
  bool waitDrawn(GraphView* v) {
    return QTest::qWaitFor([v] { return v->graph() && !v->layoutPending() && v->scene()->visible(); }, 20000);
  }
  /// Clicks the box `title` of the graph view (as a user would: mouse on the canvas).
  bool clickUnit(GraphView* v, const std::string& title) {
    const VisibleGraph* vis = v->scene()->visible();
    for (const VisibleUnit& u : vis->units) {
      if (u.title != title) continue;
      const QRectF r = v->scene()->unitRect(u.key);
      v->view()->centerOn(r.center());
      const QPoint p = v->view()->mapFromScene(r.center());
      QTest::mouseClick(v->view()->viewport(), Qt::LeftButton, {}, p);
      return true;
    }
    return false;
  }

 private slots:
  void initTestCase() {
    shots_ = qEnvironmentVariable("DYNAMO_E2E_SHOTS", QDir::currentPath() + "/screenshots");
    QDir().mkpath(shots_);
    const QString store = qEnvironmentVariable("DYNAMO_E2E_STORE");
    QVERIFY2(!store.isEmpty(), "set DYNAMO_E2E_STORE to the demo's store");
    w_ = new MainWindow;
    w_->resize(1500, 950);
    w_->show();
    QVERIFY(QTest::qWaitForWindowExposed(w_));
    QVERIFY(w_->openStore(store));
    QVERIFY(QTest::qWaitFor([this] { return w_->reportsReady(); }, 20000));
    QCOMPARE(w_->bannerText(), QString());
  }

  void selectResnetGraph() {
    const QModelIndex frame = w_->runTree()->findFrame("ResNet.forward");
    QVERIFY(frame.isValid());
    w_->runTreeView()->setCurrentIndex(frame);
    QVERIFY(QTest::qWaitFor([this] { return !w_->storeReadsPending(); }, 20000));  // read off the UI thread
    QCOMPARE(w_->compiles()->rowCount(), 1);
    QCOMPARE(w_->graphs()->rowCount(), 1);
    shot("01-compiles");
    const QTableView* table = w_->graphsView();
    const QRect cell = table->visualRect(w_->graphs()->index(0, 0));
    QSignalSpy loaded(w_, &MainWindow::graphLoaded);
    QTest::mouseClick(table->viewport(), Qt::LeftButton, {}, cell.center());  // item views want a press first
    QTest::mouseDClick(table->viewport(), Qt::LeftButton, {}, cell.center());
    QVERIFY(loaded.wait(20000) || loaded.count() == 1);
    QVERIFY(waitDrawn(w_->graphView()));
    QCOMPARE(w_->tabs()->currentWidget(), w_->graphView());
    std::vector<std::string> titles;
    for (const VisibleUnit& u : w_->graphView()->scene()->visible()->units) titles.push_back(u.title);
    QVERIFY(std::find(titles.begin(), titles.end(), "layer1") != titles.end());
    QVERIFY(std::find(titles.begin(), titles.end(), "fc") != titles.end());
    QVERIFY(titles.size() < 20);  // collapsed by default
    shot("02-resnet18-graph");
  }

  void expandModule() {
    GraphView* v = w_->graphView();
    QSignalSpy drawn(v, &GraphView::layoutDrawn);
    QVERIFY(clickUnit(v, "layer2"));
    QVERIFY(drawn.wait(20000) || drawn.count() == 1);
    QCOMPARE(v->scene()->visible()->clusters.size(), size_t(1));
    QCOMPARE(QString::fromStdString(v->scene()->visible()->clusters[0].label), QString("layer2"));
    QVERIFY(clickUnit(v, "layer2.0"));
    QVERIFY(drawn.wait(20000) || drawn.count() == 2);
    QCOMPARE(v->scene()->visible()->clusters.size(), size_t(2));
    shot("03-expanded-layer2");
  }

  void searchNodeAndOpenSource() {
    GraphView* v = w_->graphView();
    QSignalSpy drawn(v, &GraphView::layoutDrawn);
    v->searchBox()->clear();
    QTest::keyClicks(v->searchBox(), "^iadd_5$");
    QTest::keyClick(v->searchBox(), Qt::Key_Return);
    // Enter matches off the UI thread; the result is selected and revealed when it comes.
    QVERIFY(QTest::qWaitFor([v] { return !v->searchPending() && v->selectedNode() >= 0 && !v->layoutPending(); }, 20000));
    const InspectNode& n = v->graph()->node(v->selectedNode());
    QCOMPARE(QString::fromStdString(n.name), QString("iadd_5"));
    QCOMPARE(QString::fromStdString(n.modulePath), QString("layer3.1"));  // the sixth block
    QVERIFY(v->nodePanel()->toPlainText().contains("operator.iadd"));
    // The user source line: the file shown, the line highlighted.
    QVERIFY(v->sourceView()->showsFile());
    QVERIFY(v->sourceView()->header().startsWith("resnet.py:"));
    QCOMPARE(v->sourceView()->highlightedText().trimmed(), QString("out += identity"));
    shot("04-search-and-source");
  }

  void openBreak() {
    w_->tabs()->setCurrentWidget(w_->breaksPanel());
    BreaksPanel* b = w_->breaksPanel();
    QCOMPARE(b->model()->rowCount(), 1);
    b->table()->selectRow(0);
    QVERIFY(b->detail()->toPlainText().contains("data-dependent-branch"));
    QCOMPARE(b->source()->highlightedText().trimmed(), QString("if y.sum() > 10:"));
    QVERIFY(b->afterButton()->isEnabled());
    shot("05-break");
    QSignalSpy loaded(w_, &MainWindow::graphLoaded);
    QTest::mouseClick(b->afterButton(), Qt::LeftButton);
    QVERIFY(loaded.wait(20000) || loaded.count() == 1);
    QVERIFY(waitDrawn(w_->graphView()));
    QVERIFY(w_->graphView()->findChild<QLabel*>("graphTitle")->text().startsWith("<resume in scale_if_large>"));
    shot("06-graph-after-break");
  }

  void openRecompile() {
    w_->tabs()->setCurrentWidget(w_->recompilesPanel());
    RecompilesPanel* r = w_->recompilesPanel();
    QCOMPARE(r->model()->rowCount(), 1);
    r->selectRecompile(0, 0);
    const QString text = r->detail()->toPlainText();
    QVERIFY2(text.contains("expected 8") && text.contains("seen 16"), qPrintable(text));
    QVERIFY(text.contains("guard created at dynamo_demo_example.py:5"));
    QCOMPARE(r->source()->highlightedText().trimmed(), QString("y = torch.relu(x) * 2"));
    QCOMPARE(r->timeline()->compiles().size(), size_t(2));
    shot("07-recompile");
  }

  void diffTwoCompiles() {
    w_->tabs()->setCurrentWidget(w_->diffPanel());
    DiffPanel* d = w_->diffPanel();
    QVERIFY(d->beforeBox()->currentText().contains("scale_if_large \u00b7 compile #0"));
    QVERIFY(d->afterBox()->currentText().contains("scale_if_large \u00b7 compile #1"));
    QSignalSpy shown(d, &DiffPanel::diffShown);
    QTest::mouseClick(d->findChild<QPushButton*>("diffRun"), Qt::LeftButton);
    QVERIFY(shown.wait(20000) || shown.count() == 1);
    QVERIFY(waitDrawn(d->view()));
    QVERIFY(d->result());
    QCOMPARE(d->result()->added + d->result()->removed, 0);
    QVERIFY(!d->result()->changed.empty());  // x: 8 -> 16 elements
    QVERIFY(d->summary()->text().contains("changed"));
    shot("08-diff");
  }

  void cleanupTestCase() { delete w_; }
};

QTEST_MAIN(InspectorE2E)
#include "test_e2e.moc"
