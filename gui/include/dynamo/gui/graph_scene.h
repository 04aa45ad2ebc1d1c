// GraphScene: the laid-out visible graph as QGraphicsItems. Boxes are coloured by an overlay
// (overlays.def: op kind, tensor size, partition, diff), collapsed groups are drawn as stacked boxes, expanded groups as frames
// whose title collapses them. Drawing is level-of-detail: zoomed out, boxes are plain rectangles
// without text and edges straight lines, so a view of 1,500 boxes pans smoothly.
#pragma once

#include <QColor>
#include <QGraphicsScene>
#include <QSet>

#include <memory>

#include "dynamo/gui/overlays.h"
#include "dynamo/gui/visible_graph.h"

namespace dynamo::gui {

/// The fill colour of a category / of a diff status.
QColor categoryColour(OpCategory c);
QColor diffColour(DiffStatus d);

class GraphScene : public QGraphicsScene {
  Q_OBJECT
 public:
  explicit GraphScene(QObject* parent = nullptr);

  /// Replaces the content. The graph, visible graph and layout must belong together.
  void setContent(InspectGraphPtr graph, std::shared_ptr<const VisibleGraph> visible,
                  std::shared_ptr<const LayoutResult> layout, Overlay overlay);
  /// Recolours the boxes (no new layout).
  void setOverlay(Overlay overlay);
  void clearContent();

  /// Marks the units showing these nodes (search results); an empty set clears the marks.
  void setHighlighted(const QSet<int>& nodes);
  /// Selects the unit showing `node` (or nothing for -1). Returns its scene rectangle.
  QRectF selectNode(int node);
  /// The scene rectangle of a unit (by key), or a null rect.
  QRectF unitRect(const std::string& key) const;

  const VisibleGraph* visible() const { return visible_.get(); }
  const InspectGraph* graph() const { return graph_.get(); }
  /// The drawn layout (null when none); with visible(), what a provisional layout splices into.
  const std::shared_ptr<const LayoutResult>& layout() const { return layout_; }
  const std::shared_ptr<const VisibleGraph>& visibleGraph() const { return visible_; }
  Overlay overlay() const { return overlay_; }
  /// The fill a unit is drawn with under the current overlay ("#rrggbb"), "" when not drawn.
  /// The tooltip of the box with this unit key (tests); empty when none.
  QString unitToolTip(const std::string& key) const;
  QString unitFill(const std::string& key) const;
  /// Items made by the last setContent (units, clusters, edges).
  int itemCount() const { return static_cast<int>(items().size()); }

 signals:
  /// A box was clicked: a node (node >= 0) or a collapsed group (group >= 0).
  void unitClicked(int node, int group);
  /// The title of an expanded group's frame was clicked (collapse it).
  void clusterClicked(int group);

 private:
  InspectGraphPtr graph_;
  std::shared_ptr<const VisibleGraph> visible_;
  std::shared_ptr<const LayoutResult> layout_;
  Overlay overlay_ = Overlay::kOpKind;
  std::vector<QGraphicsItem*> unitItems_;
};

}  // namespace dynamo::gui
