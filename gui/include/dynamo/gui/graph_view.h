// GraphView: one graph, drawn. A search bar (regular expression over names, ops, targets,
// module paths and source lines), the overlay picker and its legend (overlays.def), the zoomable
// QGraphicsView, and the node panel (target, arguments, tensor meta, user stack, the kernel that
// computes it) over the source view (the user's line, highlighted) and, for graphs with
// generated kernels, beside it the kernel's source.
//
// Clicking a collapsed module expands it, clicking an expanded module's title collapses it;
// every change of what is expanded asks the LayoutEngine for a layout (another process) and
// redraws when it answers. An expansion not in the layout cache is drawn at once with a
// provisional layout (the module's boxes laid out alone and spliced in where its box was,
// layout_splice.h), which Graphviz's layout replaces when it comes. The UI thread never waits:
// it only computes the visible graph (milliseconds) and builds at most kMaxLayoutUnits boxes.
#pragma once

#include <QComboBox>
#include <QElapsedTimer>
#include <QFutureWatcher>
#include <QRegularExpression>
#include <QGraphicsView>
#include <QLabel>
#include <QLineEdit>
#include <QSplitter>
#include <QTextBrowser>
#include <QWidget>

#include <memory>
#include <set>

#include "dynamo/gui/graph_scene.h"
#include "dynamo/gui/layout_engine.h"
#include "dynamo/gui/source_view.h"

namespace dynamo::gui {

/// The QGraphicsView: wheel zooms around the cursor, drag pans.
class ZoomingView : public QGraphicsView {
  Q_OBJECT
 public:
  explicit ZoomingView(QGraphicsScene* scene, QWidget* parent = nullptr);
  /// Current scale (1 = 100%).
  double zoom() const { return transform().m11(); }

 protected:
  void wheelEvent(QWheelEvent* e) override;
};

/// How many expansions the view prefetches after each layout (the largest collapsed modules).
inline constexpr int kPrefetchExpansions = 3;

class GraphView : public QWidget {
  Q_OBJECT
 public:
  explicit GraphView(std::shared_ptr<LayoutCache> cache = std::make_shared<LayoutCache>(),
                     QWidget* parent = nullptr);

  /// Shows a graph, every group collapsed. `title` names it above the view. `overlay` colours
  /// the boxes when it applies to the graph (overlayApplies), else op kind does.
  void setGraph(InspectGraphPtr graph, const QString& title, Overlay overlay = Overlay::kOpKind);
  /// Recolours the boxes (no new layout); false when the overlay does not apply to the graph.
  bool setOverlay(Overlay overlay);
  Overlay overlay() const { return overlay_; }
  QComboBox* overlayPicker() const { return overlayBox_; }
  /// The legend under the picker (HTML: a coloured square and a label per key).
  QLabel* legend() const { return legend_; }
  /// Shows a message instead of a graph.
  void showMessage(const QString& message);

  /// Expands / collapses a group (a refused expansion leaves a message in message()).
  bool expandGroup(int group);
  void collapseGroup(int group);
  /// Searches; returns the matching nodes (graph order) and selects the first.
  std::vector<int> search(const QString& pattern);
  /// The same search with the matching done off the UI thread (the search box's Enter): the
  /// results are shown, and searchDone emitted, when the worker answers; a newer search or
  /// graph drops an older answer.
  void searchAsync(const QString& pattern);
  /// True while a searchAsync is under way.
  bool searchPending() const { return searchWatcher_.isRunning() || searchPending_; }
  /// Selects a node: opens its groups, lays out if needed, shows its panel and source line.
  void selectNode(int node);

  const InspectGraph* graph() const { return graph_.get(); }
  const std::set<int>& expanded() const { return expanded_; }
  GraphScene* scene() const { return scene_; }
  ZoomingView* view() const { return view_; }
  SourceView* sourceView() const { return source_; }
  /// Beside the user source: the generated source of the kernel that computes the selected node
  /// (its entry point highlighted); hidden for graphs without kernels.
  SourceView* kernelView() const { return kernelSource_; }
  /// Shows kernel k (InspectGraph::kernels() index) in the kernel view.
  void showKernel(int kernel);
  QTextBrowser* nodePanel() const { return panel_; }
  QLineEdit* searchBox() const { return searchBox_; }
  LayoutEngine* engine() const { return engine_; }
  /// Lays out in the background the views that expanding the largest collapsed modules on
  /// screen would show (kPrefetchExpansions of them), after each drawn layout; $DYNAMO_INSPECT_PREFETCH=0
  /// turns it off.
  LayoutPrefetcher* prefetcher() const { return prefetch_; }
  /// The status line under the view ("laying out 412 boxes...", a refusal, a layout error).
  QString message() const { return status_->text(); }
  /// The selected node, -1 when none.
  int selectedNode() const { return selected_; }
  /// True while a layout is pending.
  bool layoutPending() const { return engine_->busy() || pendingTicket_ != 0; }
  /// Milliseconds of the last layout (request to drawn) and of building its items.
  double lastLayoutMs() const { return lastLayoutMs_; }
  double lastSceneMs() const { return lastSceneMs_; }
  /// True while the drawn layout is a provisional one (Graphviz's is on its way).
  bool provisional() const { return provisional_; }
  /// Provisional layouts drawn so far (tests, bench).
  int provisionalCount() const { return provisionalCount_; }
  /// Turns the background layouts of likely expansions off or on (tests).
  void setPrefetchEnabled(bool on) { prefetchOn_ = on; }

 signals:
  /// Graphviz's layout was drawn (after setGraph, expand, collapse, search).
  void layoutDrawn();
  /// A provisional layout of an expansion was drawn; layoutDrawn follows when Graphviz is done.
  void provisionalDrawn();
  /// The user picked a node.
  void nodeSelected(int node);
  /// A searchAsync answered with this many matches.
  void searchDone(int matches);

 private:
  void relayout();
  void prefetchExpansions();
  void onLayout(int ticket, std::shared_ptr<const LayoutResult> result, bool fromCache);
  void onLayoutFailed(int ticket, const QString& message);
  bool drawProvisional(const std::string& dot);
  void draw(std::shared_ptr<const LayoutResult> result);
  void onUnitClicked(int node, int group);
  void showNodePanel(int node);
  void kernelSection(QString& html, const InspectNode& n) const;
  void goToResult(int delta);
  void showResults(std::vector<int> results);
  bool validPattern(const QString& pattern, QRegularExpression& re);
  void setStatus(const QString& text);
  QString bigGraphNote() const;
  void fillOverlayPicker();
  void showLegend();

  std::shared_ptr<LayoutCache> cache_;
  LayoutEngine* engine_;
  LayoutPrefetcher* prefetch_;
  std::string waitingDot_;  ///< a view the prefetcher is laying out now, asked for by the user
  GraphScene* scene_;
  ZoomingView* view_;
  QLabel* title_;
  QLabel* status_;
  QLineEdit* searchBox_;
  QLabel* searchCount_;
  QComboBox* overlayBox_;
  QLabel* legend_;
  QTextBrowser* panel_;
  SourceView* source_;
  SourceView* kernelSource_;
  QSplitter* split_;

  InspectGraphPtr graph_;
  Overlay overlay_ = Overlay::kOpKind;
  std::set<int> expanded_;
  std::shared_ptr<const VisibleGraph> pendingVisible_;
  int pendingTicket_ = 0;
  int selected_ = -1;
  bool fitAfterLayout_ = false;
  int openedGroup_ = -1;  ///< the group expandGroup just opened (a provisional layout may show it)
  bool provisional_ = false;
  int provisionalCount_ = 0;
  bool prefetchOn_ = true;
  std::vector<int> results_;
  QFutureWatcher<std::vector<int>> searchWatcher_;
  int searchTicket_ = 0;       ///< the searchAsync whose answer is awaited
  bool searchPending_ = false;
  int resultIndex_ = -1;
  QElapsedTimer layoutClock_;
  double lastLayoutMs_ = 0, lastSceneMs_ = 0;
};

}  // namespace dynamo::gui
